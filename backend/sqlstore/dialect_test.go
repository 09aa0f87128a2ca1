package sqlstore

import (
	"testing"
	"time"
)

func TestUnixTimesRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 21, 40, 1, 123456789, time.UTC)
	for _, tc := range []struct {
		codec UnixTimes
		want  time.Time
	}{
		{UnixTimes{Unit: time.Microsecond}, at.Truncate(time.Microsecond)},
		{UnixTimes{Unit: time.Nanosecond}, at},
		{UnixTimes{Unit: time.Millisecond}, at.Truncate(time.Millisecond)},
	} {
		got, err := tc.codec.Scan(tc.codec.Arg(at))
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("%v: %v, %v; want %v", tc.codec.Unit, got, err, tc.want)
		}
		if z, err := tc.codec.Scan(tc.codec.Arg(time.Time{})); err != nil || !z.IsZero() {
			t.Errorf("%v: the zero time read back as %v, %v", tc.codec.Unit, z, err)
		}
		if b, err := tc.codec.Scan([]byte("0")); err != nil || !b.IsZero() {
			t.Errorf("%v: a text 0 read back as %v, %v", tc.codec.Unit, b, err)
		}
	}
}

func TestUnixTimesClamps(t *testing.T) {
	t.Parallel()
	u := UnixTimes{Unit: time.Microsecond, Min: -100, Max: 100}
	if got := u.Arg(time.UnixMicro(1000)); got != int64(100) {
		t.Errorf("above Max: %v", got)
	}
	if got := u.Arg(time.UnixMicro(-1000)); got != int64(-100) {
		t.Errorf("below Min: %v", got)
	}
	if _, err := u.Scan("text"); err == nil {
		t.Error("a string scanned as a time")
	}
}

func TestNativeTimesNull(t *testing.T) {
	t.Parallel()
	if (NativeTimes{}).Arg(time.Time{}) != nil {
		t.Error("the zero time is not NULL")
	}
	if z, err := (NativeTimes{}).Scan(nil); err != nil || !z.IsZero() {
		t.Errorf("NULL read as %v, %v", z, err)
	}
}

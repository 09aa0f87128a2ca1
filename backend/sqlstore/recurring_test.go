package sqlstore

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// fakeRow scans its values into the destinations, as a driver would.
type fakeRow []any

func (f fakeRow) Scan(dest ...any) error {
	for i, d := range dest {
		v := reflect.ValueOf(d).Elem()
		if f[i] == nil {
			v.Set(reflect.Zero(v.Type()))
		} else {
			v.Set(reflect.ValueOf(f[i]))
		}
	}
	return nil
}

func TestRecurringScan(t *testing.T) {
	t.Parallel()
	d := &Dialect{Name: "test", Times: UnixTimes{Unit: time.Nanosecond}}
	r := NewRecurrings(d, nil, RecurringSQL{}, RecurringHooks{})
	rec, err := r.scan(fakeRow{"n", "fp", "@every 1m", int64(3), true, int64(5), "[7,8]", nil, nil, int64(0), int64(2), int64(1), true})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Name != "n" || rec.Generation != 3 || !rec.Paused || !rec.Last.Equal(time.Unix(0, 5)) || !rec.Alive.IsZero() ||
		!rec.Due.IsZero() || len(rec.Ticks) != 2 || !rec.Ticks[1].Equal(time.Unix(0, 8)) || rec.Runs != 2 || rec.Skipped != 1 {
		t.Errorf("scanned %+v", rec)
	}
	if rec.Spec == nil || len(rec.Spec) != 0 {
		t.Errorf("a set, empty spec scanned as %#v, want empty, not nil", rec.Spec)
	}
	rec, err = r.scan(fakeRow{"n", "fp", "", int64(1), false, nil, "[]", nil, nil, nil, int64(0), int64(0), false})
	if err != nil || rec.Spec != nil || rec.Ticks != nil {
		t.Errorf("a record declared in code scanned as %+v, %v", rec, err)
	}
	if _, err := r.scan(fakeRow{"n", "fp", "", int64(1), false, "x", "[]", nil, nil, nil, int64(0), int64(0), false}); err == nil {
		t.Error("a time read from a string")
	}
}

func TestRecurringPrefixEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"tenant-", "tenant.", true},
		{"a\xff", "b", true},
		{"\xff\xff", "", false},
		{"é", "\xc3\xaa", true},
	} {
		end, ok := recurringPrefixEnd(tc.prefix)
		if end != tc.end || ok != tc.ok {
			t.Errorf("recurringPrefixEnd(%q) = %q, %v; want %q, %v", tc.prefix, end, ok, tc.end, tc.ok)
		}
	}
}

func TestRecurringJSONTicksRoundTrip(t *testing.T) {
	t.Parallel()
	ticks := []time.Time{time.Date(2026, 12, 5, 22, 0, 0, 123456000, time.UTC), time.Date(2026, 12, 5, 23, 0, 0, 0, time.UTC)}
	for _, codec := range []UnixTimes{{Unit: time.Microsecond, Min: -1 << 62}, {Unit: time.Nanosecond}} {
		j := jsonTicks{codec}
		for _, src := range []any{j.Arg(ticks), []byte(j.Arg(ticks).(string))} {
			got, err := j.Scan(src)
			if err != nil || !slices.EqualFunc(got, ticks, time.Time.Equal) {
				t.Errorf("%v: %v read back as %v, %v", codec.Unit, ticks, got, err)
			}
		}
		if arg := j.Arg(nil); arg != "[]" {
			t.Errorf("%v: no ticks as %v, want []", codec.Unit, arg)
		}
		if got, err := j.Scan("[]"); err != nil || got != nil {
			t.Errorf("%v: [] read back as %v, %v; want nil", codec.Unit, got, err)
		}
		if _, err := j.Scan(42); err == nil {
			t.Errorf("%v: ticks read from an integer", codec.Unit)
		}
		if _, err := j.Scan("[1,"); err == nil {
			t.Errorf("%v: ticks read from cut JSON", codec.Unit)
		}
	}
}

func TestRecurringTimeArgs(t *testing.T) {
	t.Parallel()
	d := &Dialect{Name: "test", Times: UnixTimes{Unit: time.Microsecond, Min: -5}}
	at := time.UnixMicro(7)
	for _, tc := range []struct {
		null bool
		t    time.Time
		want any
	}{
		{false, time.Time{}, int64(-5)},
		{true, time.Time{}, nil},
		{true, at, int64(7)},
	} {
		r := NewRecurrings(d, nil, RecurringSQL{}, RecurringHooks{NullZero: tc.null})
		if got := r.time(tc.t); got != tc.want {
			t.Errorf("NullZero %v: time(%v) = %v, want %v", tc.null, tc.t, got, tc.want)
		}
	}
}

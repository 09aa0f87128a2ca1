package main

import (
	"testing"
	"time"

	"github.com/postbus/bus"
)

func TestKeyedTracker(t *testing.T) {
	t.Parallel()
	tr := newKeyedTracker()
	now := time.Now()
	tr.record(7<<runtimeTickBits|1000, "a", now, time.Millisecond)
	tr.record(7<<runtimeTickBits|1000, "a", now, time.Millisecond)  // duplicate
	tr.record(7<<runtimeTickBits|3000, "b", now, -time.Millisecond) // early
	tr.record(-1, "c", now, time.Millisecond)                       // an idle schedule's tick
	got := tr.tally()
	if got.Received != 2 || got.Duplicates != 1 || got.Early != 1 || got.Unexpected != 1 || got.Missing != 0 {
		t.Fatalf("tally = %+v", got)
	}
	seen := map[int64]time.Duration{}
	tr.each(func(seq int64, late time.Duration) { seen[seq] = late })
	if len(seen) != 2 || seen[7<<runtimeTickBits|1000] != time.Millisecond {
		t.Fatalf("each saw %v", seen)
	}
}

func TestRuntimeSeq(t *testing.T) {
	t.Parallel()
	tick := time.UnixMilli(1_700_000_000_123).UTC()
	occurrence := func(name string) *bus.Envelope {
		return &bus.Envelope{Headers: map[string]string{
			bus.HeaderRecurringName: name, bus.HeaderRecurringTick: tick.Format(time.RFC3339Nano)}}
	}
	cases := []struct {
		name string
		m    Tick
		in   *bus.Envelope
		want int64
	}{
		{"a tick", Tick{Seq: 42}, occurrence(tickName(42)), 42<<runtimeTickBits | tick.UnixMilli()},
		{"a delayed message", Tick{Seq: 5}, &bus.Envelope{}, 5},
		{"an idle schedule's tick", Tick{Seq: -1}, occurrence(idleName(3)), -1},
		{"name and message disagree", Tick{Seq: 41}, occurrence(tickName(42)), -1},
	}
	for _, c := range cases {
		if got := runtimeSeq(c.m, c.in); got != c.want {
			t.Errorf("%s: runtimeSeq = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestWindowOf(t *testing.T) {
	t.Parallel()
	w0 := time.UnixMilli(60_000)
	w1 := w0.Add(2 * time.Minute)
	tr := newKeyedTracker()
	now := time.Now()
	at := func(i int64, tick time.Time) int64 { return i<<runtimeTickBits | tick.UnixMilli() }
	tr.record(at(0, w0.Add(-time.Second)), "before", now, 0) // before the window
	tr.record(at(0, w0.Add(10*time.Second)), "a", now, 2*time.Millisecond)
	tr.record(at(0, w0.Add(70*time.Second)), "b", now, 3*time.Millisecond)
	tr.record(at(0, w0.Add(80*time.Second)), "c", now, 4*time.Millisecond) // a third tick in two intervals
	tr.record(at(1, w0.Add(5*time.Second)), "d", now, time.Millisecond)    // its second tick is missing
	tr.record(at(1, w1), "after", now, 0)                                  // after the window
	tr.record(at(2, w0), "other", now, 0)                                  // not one of the n schedules
	tr.record(at(1, w0.Add(-2*time.Second)), "e", now, 5*time.Second)      // before the window, handled in it
	got := windowOf(tr, w0, w1, 2, 2)
	if got.received != 3 || got.extra != 1 || len(got.lateness) != 3 || got.handled != 5 {
		t.Fatalf("windowOf = %+v, want 3 received (one missing), 1 extra and 5 handled in the window", got)
	}
}

package main

import (
	"testing"
	"time"
)

func handledTick(name string, tick time.Time, pid int, at time.Time) event {
	return event{kind: eventHandled, id: tickID(name, tick, "id-"+name+tick.Format("150405")), pid: pid, at: at}
}

func TestAnalyzeRecurringCountsLostEarlyAndDuplicates(t *testing.T) {
	from := time.Date(2030, 1, 1, 12, 0, 0, 500_000_000, time.UTC)
	to := from.Add(3 * time.Second) // ticks 12:00:01, :02, :03
	tick := func(s int) time.Time { return time.Date(2030, 1, 1, 12, 0, s, 0, time.UTC) }
	events := []event{
		handledTick("a", tick(1), 1, tick(1).Add(10*time.Millisecond)),
		handledTick("a", tick(2), 1, tick(2).Add(20*time.Millisecond)),
		handledTick("a", tick(2), 2, tick(2).Add(900*time.Millisecond)), // pid 1 killed in between: explained
		handledTick("a", tick(3), 2, tick(3).Add(-time.Millisecond)),    // early
		handledTick("b", tick(1), 2, tick(1).Add(30*time.Millisecond)),
		handledTick("b", tick(1), 2, tick(1).Add(40*time.Millisecond)), // nothing explains it
		handledTick("b", tick(0), 2, tick(0).Add(40*time.Millisecond)), // before the window: not expected
		// b's tick 2 is lost; b's tick 3 arrives
		handledTick("b", tick(3), 3, tick(3).Add(50*time.Millisecond)),
	}
	kills := []fault{{kind: faultKill, pid: 1, start: tick(2).Add(500 * time.Millisecond), end: tick(2).Add(500 * time.Millisecond)}}
	r := analyzeRecurring([]string{"a", "b"}, time.Second, from, to, nil, events, kills)
	if r.expected != 6 || r.delivered != 5 || len(r.lost) != 1 || r.lost[0] != (tickKey{"b", tick(2).UnixNano()}) {
		t.Errorf("expected %d, delivered %d, lost %v; want 6, 5, b at 12:00:02", r.expected, r.delivered, r.lost)
	}
	if r.early != 1 || r.duplicates != 2 || r.explained != 1 || r.idsPerTick != 0 || r.handlings != 8 {
		t.Errorf("early %d, duplicates %d (%d explained), ids per tick %d, handlings %d; want 1, 2 (1), 0, 8",
			r.early, r.duplicates, r.explained, r.idsPerTick, r.handlings)
	}
	if !r.failed() {
		t.Error("a lost, early and unexplained duplicate run passed")
	}
}

func TestAnalyzeRecurringCountsADeadSpanOnce(t *testing.T) {
	from := time.Date(2030, 1, 1, 12, 0, 0, 500_000_000, time.UTC)
	to := from.Add(5 * time.Second) // ticks :01 to :05
	tick := func(s int) time.Time { return time.Date(2030, 1, 1, 12, 0, s, 0, time.UTC) }
	dead := []deadSpan{{from: tick(1).Add(100 * time.Millisecond), to: tick(4).Add(200 * time.Millisecond)}} // :02, :03, :04
	events := []event{
		handledTick("a", tick(1), 1, tick(1)),
		handledTick("a", tick(4), 2, tick(4).Add(300*time.Millisecond)), // MissedOnce: one for the span
		handledTick("a", tick(5), 2, tick(5)),
	}
	r := analyzeRecurring([]string{"a"}, time.Second, from, to, dead, events, nil)
	if r.expected != 3 || r.delivered != 3 || len(r.lost) != 0 || r.failed() {
		t.Errorf("expected %d, delivered %d, lost %v, failed %v; want 3, 3, none", r.expected, r.delivered, r.lost, r.failed())
	}
	if len(r.lateness) != 2 {
		t.Errorf("lateness of %d ticks, want the 2 outside the span", len(r.lateness))
	}
}

// A duplicate after a kill of the process that handed the occurrence over
// (it died before deleting the row, which came back after its lease) is
// explained, though no handler was killed.
func TestAnalyzeRecurringExplainsAKilledDispatcher(t *testing.T) {
	from := time.Date(2030, 1, 1, 12, 0, 0, 500_000_000, time.UTC)
	to := from.Add(time.Second)
	tick := time.Date(2030, 1, 1, 12, 0, 1, 0, time.UTC)
	first := handledTick("a", tick, 2, tick.Add(10*time.Millisecond))
	_, _, msgID, _ := parseTickID(first.id)
	events := []event{
		{kind: eventHandOver, id: msgID, pid: 1, at: tick},
		first,
		{kind: eventHandOver, id: msgID, pid: 3, at: tick.Add(30 * time.Second)},
		handledTick("a", tick, 2, tick.Add(30*time.Second+10*time.Millisecond)),
	}
	kill := fault{kind: faultKill, pid: 1, start: tick.Add(time.Second), end: tick.Add(time.Second)}
	if r := analyzeRecurring([]string{"a"}, time.Second, from, to, nil, events, []fault{kill}); r.duplicates != 1 || r.explained != 1 || r.failed() {
		t.Errorf("duplicates %d (%d explained), failed %v; want 1 (1), passed", r.duplicates, r.explained, r.failed())
	}
	if r := analyzeRecurring([]string{"a"}, time.Second, from, to, nil, events, nil); r.explained != 0 || !r.failed() {
		t.Errorf("with no kill: %d explained, failed %v; want 0, failed", r.explained, r.failed())
	}
}

func TestAnalyzeRuntimeCountsLostAndOccurrencesAfterAChange(t *testing.T) {
	tick := func(s int) time.Time { return time.Date(2030, 1, 1, 12, 0, s, 0, time.UTC) }
	at := func(s int, ms int) time.Time { return tick(s).Add(time.Duration(ms) * time.Millisecond) }
	defs := []runtimeDef{
		// rt-000#1 live from 0.1 s, replaced at 4.0 s (returned at 4.1 s); #2 live from 4.1 s.
		{key: "rt-000#1", every: time.Second, from: at(0, 100), to: tick(4), ended: at(4, 100)},
		{key: "rt-000#2", every: 2 * time.Second, from: at(4, 100)},
	}
	events := []event{
		handledTick("rt-000#1", tick(1), 1, at(1, 5)),
		handledTick("rt-000#1", tick(2), 1, at(2, 5)),
		// tick 3 of #1 is lost
		handledTick("rt-000#1", tick(4), 1, at(4, 5)), // at the change: expected
		handledTick("rt-000#1", tick(5), 1, at(5, 5)), // after the change took effect: stale
		handledTick("rt-000#2", tick(6), 2, at(6, 5)),
		handledTick("rt-000#2", tick(8), 2, at(8, 5)),
	}
	r := analyzeRuntime(defs, tick(8), events)
	if r.expected != 6 || r.delivered != 5 || len(r.lost) != 1 || r.lost[0] != (tickKey{"rt-000#1", tick(3).UnixNano()}) {
		t.Errorf("expected %d, delivered %d, lost %v; want 6, 5, #1 at 12:00:03", r.expected, r.delivered, r.lost)
	}
	if len(r.stale) != 1 || r.stale[0] != (tickKey{"rt-000#1", tick(5).UnixNano()}) || !r.failed() {
		t.Errorf("stale %v; want #1's tick of 12:00:05, and a failed run", r.stale)
	}
}

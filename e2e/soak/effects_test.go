package main

import (
	"slices"
	"testing"
	"time"
)

func TestAnalyzeEffectsCountsRowsPerMessageAndEvent(t *testing.T) {
	t.Parallel()
	msgs := []*message{
		{id: "once", sent: true},
		{id: "no-work", sent: true},
		{id: "work-twice", sent: true},
		{id: "no-event", sent: true},
		{id: "event-thrice", sent: true},
		{id: "unsent"}, // a Send reported as failed that was stored after all
	}
	counts := map[string]effectCounts{
		"once":         {work: 1, event: 1},
		"no-work":      {event: 1},
		"work-twice":   {work: 2, event: 1},
		"no-event":     {work: 1},
		"event-thrice": {work: 1, event: 3},
		"unsent":       {work: 1, event: 1},
		"stranger":     {work: 1},
	}
	r := analyzeEffects(msgs, counts)
	check := func(what string, got, want []string) {
		t.Helper()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("work missing", r.workMissing, []string{"no-work"})
	check("work twice", r.workTwice, []string{"work-twice"})
	check("event missing", r.eventMissing, []string{"no-event"})
	check("event twice", r.eventTwice, []string{"event-thrice"})
	if r.messages != 5 || r.extraRows != 3 || r.unknown != 1 || r.missing() != 2 {
		t.Errorf("messages %d, extra rows %d, unknown %d, missing %d; want 5, 3, 1, 2", r.messages, r.extraRows, r.unknown, r.missing())
	}
	if !r.failed() {
		t.Error("failed() = false")
	}
}

func TestAnalyzeEffectsExactlyOncePasses(t *testing.T) {
	t.Parallel()
	msgs := []*message{{id: "a", sent: true}, {id: "b", sent: true}}
	r := analyzeEffects(msgs, map[string]effectCounts{"a": {1, 1}, "b": {1, 1}})
	if r.failed() || r.missing() != 0 || r.messages != 2 {
		t.Errorf("report %+v: want 2 messages, nothing missing, not failed", r)
	}
}

func TestAnalyzeExplainsRolledBackHandlings(t *testing.T) {
	t.Parallel()
	msgs := []*message{{id: "a", due: at(0), sent: true}}
	// Handled three times by one process with no fault: two commits that
	// failed after the journal line. One business row says so.
	events := []event{handled("a", 1, 1), handled("a", 1, 2), handled("a", 1, 3)}
	r := analyze(msgs, events, evidence{committed: map[string]int{"a": 1}})
	if r.explainedBy[causeRollback] != 2 || r.failed() {
		t.Errorf("explained by rolled-back handlings %d, failed %v; want 2, false", r.explainedBy[causeRollback], r.failed())
	}
	// Two business rows: one of the duplicates committed.
	r = analyze(msgs, events, evidence{committed: map[string]int{"a": 2}})
	if r.explainedBy[causeRollback] != 1 || len(r.unexplained()) != 1 || !r.failed() {
		t.Errorf("explained by rolled-back handlings %d, unexplained %d, failed %v; want 1, 1, true",
			r.explainedBy[causeRollback], len(r.unexplained()), r.failed())
	}
	// Without the outbox nothing is rolled back.
	r = analyze(msgs, events, evidence{})
	if r.explainedBy[causeRollback] != 0 || !r.failed() {
		t.Errorf("without the outbox: explained by rolled-back handlings %d, failed %v; want 0, true",
			r.explainedBy[causeRollback], r.failed())
	}
	r = analyze(msgs, nil, evidence{committed: map[string]int{}})
	if !r.failed() {
		t.Error("failed() = false with the message lost")
	}
}

func TestPlanEveryTakesTheKindsInTurn(t *testing.T) {
	t.Parallel()
	plan := planEvery(time.Minute, time.Minute, 5*time.Minute+time.Second)
	var kinds []string
	for i, p := range plan {
		kinds = append(kinds, p.kind)
		if want := time.Duration(i+1) * time.Minute; p.offset != want {
			t.Errorf("fault %d at %s, want %s", i, p.offset, want)
		}
	}
	if want := []string{faultKill, faultStop, faultTerminate, faultCut, faultKill}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
}

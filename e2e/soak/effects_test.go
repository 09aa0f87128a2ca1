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

func TestFailedOutboxIgnoresDuplicateHandlings(t *testing.T) {
	t.Parallel()
	msgs := []*message{{id: "a", due: at(0), sent: true}}
	// Handled twice by one process with no fault: a commit that failed
	// after the journal line. The effects, not the journal, decide.
	r := analyze(msgs, []event{handled("a", 1, 1), handled("a", 1, 2)}, nil)
	if !r.failed() || r.failedOutbox() {
		t.Errorf("failed() = %t, failedOutbox() = %t; want true, false", r.failed(), r.failedOutbox())
	}
	r = analyze(msgs, nil, nil)
	if !r.failedOutbox() {
		t.Error("failedOutbox() = false with the message lost")
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

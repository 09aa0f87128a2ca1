package main

import (
	"slices"
	"time"
)

// tickKey is one tick of one schedule.
type tickKey struct {
	name string
	tick int64 // Unix nanoseconds
}

// deadSpan is a time when no worker ran: from the kill of the last live
// worker until the first one ready again.
type deadSpan struct{ from, to time.Time }

// recurringReport is what the recurring workload found.
//
// Expected are the ticks t of every schedule with from < t <= to (the
// window: from is when the first worker was ready, to is the end of the
// kill phase), each once. A tick that falls in a dead span (no worker
// running) is caught up by MissedOnce: the ticks of one schedule in one
// span count as one expected group, and the group is lost only when none
// of its ticks is handled. Ticks outside the window are not expected, but
// their handlings still count for early and duplicates.
type recurringReport struct {
	expected   int // ticks outside dead spans, plus one per schedule and dead span with ticks
	delivered  int // expected ticks (or groups) handled at least once
	lost       []tickKey
	early      int       // handlings before their tick
	duplicates int       // handlings of a tick after its first
	explained  int       // duplicates a kill explains (see analyzeRecurring)
	idsPerTick int       // ticks handled under more than one message ID (stored twice)
	handlings  int       // every handling, in the window or not
	lateness   []float64 // first handling minus tick, seconds, of the expected ticks outside dead spans
}

// failed reports whether the run found a defect.
func (r *recurringReport) failed() bool {
	return len(r.lost) > 0 || r.early > 0 || r.explained < r.duplicates || r.idsPerTick > 0
}

// percentile returns the q-quantile (0..1) of the lateness, in seconds.
func (r *recurringReport) percentile(q float64) float64 {
	if len(r.lateness) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(r.lateness))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// analyzeRecurring compares the ticks due in (from, to] of schedules
// every apart with the handlings and hand-overs journaled. kills are the
// SIGKILLs, which explain a duplicate as in analyze: when they hit a
// handler of it between the two handlings (killed before its
// acknowledgement), or a process that handed the occurrence over before
// the second handling, between that hand-over and the second handling
// (killed before it deleted the row, which came back after its lease).
func analyzeRecurring(names []string, every time.Duration, from, to time.Time, dead []deadSpan,
	events []event, kills []fault) *recurringReport {
	r := &recurringReport{}
	handled := map[tickKey][]event{}
	ids := map[tickKey]map[string]bool{}
	handOvers := map[string][]event{} // by message ID
	for _, ev := range events {
		if ev.kind == eventHandOver {
			handOvers[ev.id] = append(handOvers[ev.id], ev)
		}
		if ev.kind != eventHandled {
			continue
		}
		name, tick, msgID, ok := parseTickID(ev.id)
		if !ok {
			continue
		}
		r.handlings++
		k := tickKey{name, tick.UnixNano()}
		handled[k] = append(handled[k], ev)
		if ids[k] == nil {
			ids[k] = map[string]bool{}
		}
		ids[k][msgID] = true
		if ev.at.Before(tick) {
			r.early++
		}
	}
	for k, hs := range handled {
		if len(ids[k]) > 1 {
			r.idsPerTick++
		}
		slices.SortFunc(hs, func(a, b event) int { return a.at.Compare(b.at) })
		for i := 1; i < len(hs); i++ {
			r.duplicates++
			_, _, msgID, _ := parseTickID(hs[i].id)
			if killedBetween(kills, hs[0].pid, hs[0].at, hs[i].at) ||
				explain(msgID, hs[i-1], hs[i], handOvers[msgID], kills).by != nil {
				r.explained++
			}
		}
	}
	first := from.Truncate(every).Add(every)
	for _, name := range names {
		groups := map[int]bool{} // dead span index -> a tick of it handled
		for t := first; !t.After(to); t = t.Add(every) {
			k := tickKey{name, t.UnixNano()}
			if i := slices.IndexFunc(dead, func(d deadSpan) bool { return t.After(d.from) && !t.After(d.to) }); i >= 0 {
				groups[i] = groups[i] || len(handled[k]) > 0
				continue
			}
			r.expected++
			hs := handled[k]
			if len(hs) == 0 {
				r.lost = append(r.lost, k)
				continue
			}
			r.delivered++
			r.lateness = append(r.lateness, hs[0].at.Sub(t).Seconds())
		}
		for i, got := range groups {
			r.expected++
			if got {
				r.delivered++
			} else {
				r.lost = append(r.lost, tickKey{name, dead[i].to.UnixNano()})
			}
		}
	}
	return r
}

// killedBetween reports whether the process pid was SIGKILLed between
// from and to (overlaps widens them by slack).
func killedBetween(kills []fault, pid int, from, to time.Time) bool {
	return slices.ContainsFunc(kills, func(f fault) bool {
		return f.kind == faultKill && f.pid == pid && overlaps(&f, from, to)
	})
}

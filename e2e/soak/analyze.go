package main

import (
	"cmp"
	"slices"
	"time"
)

// slack widens the windows in which a kill or stop explains a duplicate,
// for the time between a process's journal write (or the soak's signal)
// and the clock reading stamped on it.
const slack = 250 * time.Millisecond

// duplicate is a message handled again: the handlings first and second,
// consecutive in time, and what explains the second.
type duplicate struct {
	id            string
	first, second event
	// by is the kill or stop that explains it; nil when nothing does.
	by *fault
	// near are the other faults in the window (cuts, terminations, kills
	// and stops of processes that never held the message).
	near []fault
	// sendRetries is how often the producer's Send of the message failed
	// before one succeeded: each failed Send may have reached the broker.
	sendRetries int
}

// early is a message handled before its due time.
type early struct {
	id  string
	by  time.Duration
	pid int
}

// report is what the soak found.
type report struct {
	sent, unsent int
	handlings    int
	handOvers    int
	handedAgain  int // messages handed to the transport more often than their delays and retries need
	lost         []string
	lostParked   int // lost messages that went to the error or dead-letter queue
	early        []early
	unknown      int // handled IDs the producer never sent
	duplicates   []duplicate
	explained    int
	// Unexplained duplicates by what came with them, each counted once, in
	// this order: the producer retried a failed Send of the message; a cut
	// or backend termination in their window; neither (the rest).
	afterRetriedSend int
	nearOutage       int
}

// unexplained returns the duplicates no kill or stop explains.
func (r *report) unexplained() []duplicate {
	var out []duplicate
	for _, d := range r.duplicates {
		if d.by == nil {
			out = append(out, d)
		}
	}
	return out
}

// failed reports whether the run found a defect.
func (r *report) failed() bool {
	return len(r.lost) > 0 || len(r.early) > 0 || r.explained < len(r.duplicates) || r.unsent > 0 || r.unknown > 0
}

// failedOutbox is failed for the -outbox soak, where a handling whose
// commit failed runs again: its journal line is a duplicate without
// effects, so duplicates are reported and the effects table decides.
func (r *report) failedOutbox() bool {
	return len(r.lost) > 0 || len(r.early) > 0 || r.unsent > 0 || r.unknown > 0
}

// analyze compares the producer's record with the workers' journals and the
// faults.
//
// A message is lost when no worker handled it, early when its first
// handling came before its due time. Every handling after the first is a
// duplicate. A duplicate is explained when a worker that could have held
// the message was SIGKILLed or SIGSTOPped in the window where holding it
// leads to a second handling:
//   - a worker that handled the message (first or second handling), killed
//     or stopped between the two handlings: killed before its
//     acknowledgement, or stopped long enough for the broker to give the
//     message to another consumer;
//   - a worker that handed the message to the transport before the second
//     handling, killed or stopped between that hand-over and the second
//     handling: it may have died, or lost its lease, before deleting the
//     row, which another dispatcher then sends again.
//
// Connection cuts, backend terminations and a producer's retried Send never
// explain a duplicate (the bus must survive them without one), but the
// report counts the unexplained duplicates that came with them apart.
func analyze(msgs []*message, events []event, faults []fault) *report {
	r := &report{}
	byID := map[string][]event{}
	for _, ev := range events {
		byID[ev.id] = append(byID[ev.id], ev)
	}
	known := map[string]bool{}
	for _, m := range msgs {
		known[m.id] = true
		if !m.sent {
			r.unsent++
			continue
		}
		r.sent++
		evs := byID[m.id]
		slices.SortFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
		var handled, handOvers []event
		parked := false
		for _, ev := range evs {
			switch ev.kind {
			case eventHandled:
				handled = append(handled, ev)
			case eventHandOver:
				handOvers = append(handOvers, ev)
			case eventParked:
				parked = true
			}
		}
		r.handlings += len(handled)
		r.handOvers += len(handOvers)
		if len(handOvers) > m.handOversNeeded() {
			r.handedAgain++
		}
		if len(handled) == 0 {
			r.lost = append(r.lost, m.id)
			if parked {
				r.lostParked++
			}
			continue
		}
		if first := handled[0]; first.at.Before(m.due) {
			r.early = append(r.early, early{id: m.id, by: m.due.Sub(first.at), pid: first.pid})
		}
		for i := 1; i < len(handled); i++ {
			d := explain(m.id, handled[i-1], handled[i], handOvers, faults)
			d.sendRetries = m.retries
			r.duplicates = append(r.duplicates, d)
			switch {
			case d.by != nil:
				r.explained++
			case d.sendRetries > 0:
				r.afterRetriedSend++
			case slices.ContainsFunc(d.near, func(f fault) bool { return !f.holds() }):
				r.nearOutage++
			}
		}
	}
	for id, evs := range byID {
		if !known[id] && slices.ContainsFunc(evs, func(ev event) bool { return ev.kind == eventHandled }) {
			r.unknown++
		}
	}
	slices.SortFunc(r.early, func(a, b early) int { return cmp.Compare(b.by, a.by) })
	return r
}

// explain looks for the kill or stop that explains a second handling.
func explain(id string, first, second event, handOvers []event, faults []fault) duplicate {
	d := duplicate{id: id, first: first, second: second}
	// Each holder: a process and the time from which its loss could cause
	// the second handling.
	type holder struct {
		pid  int
		from time.Time
	}
	holders := []holder{{first.pid, first.at}, {second.pid, first.at}}
	windowStart := first.at
	for _, h := range handOvers {
		if !h.at.After(second.at) {
			holders = append(holders, holder{h.pid, h.at})
			windowStart = minTime(windowStart, h.at)
		}
	}
	for i := range faults {
		f := &faults[i]
		if f.failed != nil || !overlaps(f, windowStart, second.at) {
			continue
		}
		if f.holds() && slices.ContainsFunc(holders, func(h holder) bool {
			return h.pid == f.pid && overlaps(f, h.from, second.at)
		}) {
			if d.by == nil {
				d.by = f
			}
			continue
		}
		d.near = append(d.near, *f)
	}
	return d
}

// overlaps reports whether f, widened by slack, overlaps [from, to].
func overlaps(f *fault, from, to time.Time) bool {
	return !f.end.Add(slack).Before(from) && !f.start.Add(-slack).After(to)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

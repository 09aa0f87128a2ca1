package main

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// slack widens the windows in which a kill or stop explains a duplicate,
// for the time between a process's journal write (or the soak's signal)
// and the clock reading stamped on it.
const slack = 250 * time.Millisecond

// What explains a duplicate: the fault that caused it, from what the soak
// recorded. The empty cause is an unexplained duplicate.
const (
	// causeKillStop: a worker that held the message was killed or stopped
	// (explain).
	causeKillStop = "kill/stop"
	// causeRollback: with -outbox, the message has fewer business rows
	// than handlings, so this handling's transaction did not commit; it ran
	// again, with no second effect.
	causeRollback = "rolled-back handling"
	// causeRetriedSend: a Send of the message failed and the producer sent
	// it again with the same ID; each failed Send explains one duplicate.
	causeRetriedSend = "retried send"
	// causeConnection: a cut or backend termination that reaches the
	// message's path began while the message was in flight (connectionLoss).
	causeConnection = "cut/termination"
)

// causes lists the causes in the order analyze tries them.
var causes = []string{causeKillStop, causeRollback, causeRetriedSend, causeConnection}

// duplicate is a message handled again: the handlings first and second,
// consecutive in time, and what explains the second.
type duplicate struct {
	id            string
	first, second event
	cause         string // "" when nothing explains it
	// by is the fault that explains it (kill, stop, cut, termination); nil
	// for the other causes.
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
	// explainedBy counts the explained duplicates by cause.
	explainedBy map[string]int
	// margin is how long before a cut or termination a message counts as
	// in flight (cutMargin).
	margin time.Duration
	// late is how late the first handling of each delayed message came
	// after its due time, in increasing order.
	late []time.Duration
}

// evidence is what the analysis explains duplicates with besides the
// journals and the producer's record.
type evidence struct {
	faults []fault
	// dbIsBroker: the PostgreSQL transport, whose messages travel on the
	// database connections, so a database cut or backend termination
	// reaches every message.
	dbIsBroker bool
	// committed is the number of business rows of each message with
	// -outbox (a handling's row commits with its transaction); nil without.
	committed map[string]int
}

// unexplained returns the duplicates no recorded fault explains.
func (r *report) unexplained() []duplicate {
	var out []duplicate
	for _, d := range r.duplicates {
		if d.cause == "" {
			out = append(out, d)
		}
	}
	return out
}

// failed reports whether the run found a defect.
func (r *report) failed() bool {
	return len(r.lost) > 0 || len(r.early) > 0 || len(r.unexplained()) > 0 || r.unsent > 0 || r.unknown > 0
}

// analyze compares the producer's record with the workers' journals and the
// evidence.
//
// A message is lost when no worker handled it, early when its first
// handling came before its due time. Every handling after the first is a
// duplicate, explained by the first of these that applies:
//
//   - a kill or stop (explain): a worker that could have held the message
//     was SIGKILLed or SIGSTOPped in the window where holding it leads to a
//     second handling;
//   - a rolled-back handling (-outbox): the message has fewer business rows
//     than handlings, so some handlings' transactions did not commit; each
//     explains one duplicate;
//   - a retried send: the producer's Send of the message failed (a cut
//     lost its reply) and it sent the message again with the same ID; each
//     failed Send explains one duplicate;
//   - a cut or backend termination (connectionLoss): it reaches the
//     message's path and began while the message was in flight, and the
//     second handling came after it began.
func analyze(msgs []*message, events []event, ev evidence) *report {
	r := &report{explainedBy: map[string]int{}, margin: cutMargin(msgs, events, ev.faults)}
	byID := map[string][]event{}
	for _, e := range events {
		byID[e.id] = append(byID[e.id], e)
	}
	known := map[string]bool{}
	for _, m := range msgs {
		known[m.id] = true
		if !m.sent {
			r.unsent++
			continue
		}
		r.sent++
		handled, handOvers, parked := split(byID[m.id])
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
		} else if m.delay > 0 {
			r.late = append(r.late, first.at.Sub(m.due))
		}
		rolledBack := 0 // handlings without a business row
		if ev.committed != nil {
			rolledBack = max(0, len(handled)-ev.committed[m.id])
		}
		resent := m.retries()
		for i := 1; i < len(handled); i++ {
			d := explain(m.id, handled[i-1], handled[i], handOvers, ev.faults)
			d.sendRetries = resent
			switch {
			case d.by != nil:
				d.cause = causeKillStop
				rolledBack = max(0, rolledBack-1) // a killed handling did not commit either
			case rolledBack > 0:
				d.cause = causeRollback
				rolledBack--
			case resent > 0:
				d.cause = causeRetriedSend
				resent--
			default:
				if f := connectionLoss(m, d, handOvers, ev, r.margin); f != nil {
					d.cause, d.by = causeConnection, f
				}
			}
			if d.cause != "" {
				r.explainedBy[d.cause]++
			}
			r.duplicates = append(r.duplicates, d)
		}
	}
	for id, evs := range byID {
		if !known[id] && slices.ContainsFunc(evs, func(e event) bool { return e.kind == eventHandled }) {
			r.unknown++
		}
	}
	slices.SortFunc(r.early, func(a, b early) int { return cmp.Compare(b.by, a.by) })
	slices.Sort(r.late)
	return r
}

// lateAtLeast counts the delayed messages handled limit or more after
// their due time.
func (r *report) lateAtLeast(limit time.Duration) int {
	i, _ := slices.BinarySearch(r.late, limit)
	return len(r.late) - i
}

// lateQuantile is the q-th quantile (0 < q <= 1) of the delayed messages'
// lateness; 0 when there is none.
func (r *report) lateQuantile(q float64) time.Duration {
	if len(r.late) == 0 {
		return 0
	}
	return r.late[max(0, int(q*float64(len(r.late))+0.999999)-1)]
}

// split sorts a message's events by time and splits them into handlings
// and hand-overs; parked reports whether it went to an error queue.
func split(evs []event) (handled, handOvers []event, parked bool) {
	slices.SortFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		switch e.kind {
		case eventHandled:
			handled = append(handled, e)
		case eventHandOver:
			handOvers = append(handOvers, e)
		case eventParked:
			parked = true
		}
	}
	return handled, handOvers, parked
}

// connectionLoss returns the cut or backend termination that explains
// duplicate d of m, or nil. The fault must reach the message's path: a
// broker cut always; a database cut or a backend termination when the
// database is the broker, or when the message went through the store (a
// dispatcher handed it over, or -outbox, where every handling commits
// there). The message must have been in flight when the fault began: sent
// by the producer, handed over by a dispatcher, or handled (its
// acknowledgement or commit still to come) within margin before the fault
// began, or during it; and the second handling must come after the fault
// began; or, for a store fault, it began between two hand-overs of the
// message (redispatchedAfter). A publish whose confirm the cut lost is published again, an
// acknowledgement the cut lost is delivered again, a row whose delete it
// lost is dispatched again; a row due during a store fault was held by a
// claim the fault ended, and goes out again from another dispatcher. On the PostgreSQL transport a store fault
// also ends the consumers' liveness-lock sessions: other consumers free
// the rows the consumer holds at once, while it goes on handling them
// until it notices, within livenessWindow, so a message it handled that
// long after the fault began may be handled again.
func connectionLoss(m *message, d duplicate, handOvers []event, ev evidence, margin time.Duration) *fault {
	viaStore := ev.dbIsBroker || ev.committed != nil || len(handOvers) > 0
	moments := []time.Time{m.due.Add(-m.delay), d.first.at}
	if len(handOvers) > 0 {
		// Due during a store fault: a dispatcher held its row then, in a
		// claim the fault ended, and may hand it over as its connections
		// come back while another dispatcher claims the freed row.
		moments = append(moments, m.due)
	}
	for _, h := range handOvers {
		if !h.at.After(d.second.at) {
			moments = append(moments, h.at)
		}
	}
	for i := range ev.faults {
		f := &ev.faults[i]
		storeFault := f.kind == faultTerminate || f.kind == faultCut && strings.Contains(f.what, "database")
		reaches := f.kind == faultCut && strings.Contains(f.what, "broker") || viaStore && storeFault
		if f.failed != nil || !reaches || !d.second.at.After(f.start) {
			continue
		}
		end := f.end.Add(slack)
		if ev.dbIsBroker && storeFault {
			end = end.Add(livenessWindow)
		}
		if slices.ContainsFunc(moments, func(t time.Time) bool {
			return !t.Before(f.start.Add(-margin)) && !t.After(end)
		}) || storeFault && redispatchedAfter(f, handOvers, d.second.at) {
			return f
		}
	}
	return nil
}

// livenessWindow is how long after a store fault a PostgreSQL transport
// consumer may still handle a message whose row others freed when the
// fault ended its liveness lock: it checks the lock every second, and a
// message it had received before may start its handling up to then.
const livenessWindow = 2 * time.Second

// redispatchedAfter reports whether a store fault f fell while the
// message's row was still in the store after a hand-over: between a
// hand-over and a later one before the second handling. A dispatcher
// hands a row over again only once its lease lapsed, that is when its
// delete did not reach the store in time; a batch's delete waits for every
// hand-over of the batch, so under load it can still be pending seconds
// after the message was handled. The later hand-over is the evidence that
// the row outlived the fault.
func redispatchedAfter(f *fault, handOvers []event, second time.Time) bool {
	for i := 1; i < len(handOvers); i++ {
		if again := handOvers[i].at; !again.After(second) &&
			!f.start.Before(handOvers[i-1].at) && f.start.Before(again) {
			return true
		}
	}
	return false
}

// cutMargin is how long before a cut or termination a message counts as
// in flight: the 99th percentile of the time from the producer's Send to
// the first handling, over the messages sent at once whose Send never
// failed, whose handler did not fail on purpose and whose trip no fault
// overlapped (the latency of the run's load, not of its faults), and at
// least slack. A publish's confirm and a handling's acknowledgement take
// less than a message takes from Send to handler, so a message sent or
// handled earlier than that before the fault began was settled when it
// began.
func cutMargin(msgs []*message, events []event, faults []fault) time.Duration {
	first := map[string]time.Time{}
	for _, e := range events {
		if t, ok := first[e.id]; e.kind == eventHandled && (!ok || e.at.Before(t)) {
			first[e.id] = e.at
		}
	}
	var latencies []time.Duration
	for _, m := range msgs {
		t, ok := first[m.id]
		if !ok || !m.sent || m.delay > 0 || m.fail != "" || m.retries() > 0 ||
			slices.ContainsFunc(faults, func(f fault) bool { return overlaps(&f, m.due, t) }) {
			continue
		}
		latencies = append(latencies, t.Sub(m.due))
	}
	if len(latencies) == 0 {
		return slack
	}
	slices.Sort(latencies)
	return max(slack, latencies[(99*len(latencies)+99)/100-1])
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

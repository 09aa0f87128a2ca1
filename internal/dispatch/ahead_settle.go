package dispatch

import (
	"context"
	"time"

	"github.com/postbus/bus/backend"
)

// settleBatch gathers the results of a look-ahead dispatcher's hand-overs
// and settles them together (see dispatcher.settle), one batch at a time in
// the background, so that the loop goes on handing rows over meanwhile. It
// measures how fast its settlings go (rate), for the bound on rows held.
type settleBatch struct {
	rows    []backend.OutgoingMessage
	results []error
	by      time.Time     // settle before: the earliest lease's end, less a margin
	first   time.Time     // when the oldest result was added
	running chan struct{} // closed when the settling in flight is over; nil when none
	flying  int           // rows in the settling in flight
	flyBy   time.Time     // the by of the settling in flight
	took    time.Duration // how long it took, set before running is closed
	rate    drainRate
}

// pending is how many rows wait for their settling or are in it.
func (s *settleBatch) pending() int { return len(s.rows) + s.flying }

// finished is closed when the settling in flight is over; nil when none.
func (s *settleBatch) finished() <-chan struct{} { return s.running }

// clearOf reports whether no row waiting for its settling or in it has a
// lease that may end by t: a claim that looks as far as t cannot take back
// a row whose delete is still on its way.
func (s *settleBatch) clearOf(t time.Time) bool {
	return (len(s.rows) == 0 || s.by.After(t)) && (s.running == nil || s.flyBy.After(t))
}

// reap takes note of the settling in flight if it is over, without waiting.
func (s *settleBatch) reap() {
	select {
	case <-s.running: // nil when none: never ready
		s.wait()
	default:
	}
}

// add queues results of rows for settling before by.
func (s *settleBatch) add(rows []backend.OutgoingMessage, results []error, by, now time.Time) {
	if len(rows) == 0 {
		return
	}
	if len(s.rows) == 0 {
		s.first, s.by = now, by
	}
	if by.Before(s.by) {
		s.by = by
	}
	s.rows = append(s.rows, rows...)
	s.results = append(s.results, results...)
}

// due is when the queued results are settled; zero when there are none.
// It is aheadSettleDelay after the oldest, sooner when a lease would leave
// less than as much again for the store calls' retries.
func (s *settleBatch) due() time.Time {
	if len(s.rows) == 0 {
		return time.Time{}
	}
	due := s.first.Add(aheadSettleDelay)
	if half := s.first.Add(s.by.Sub(s.first) / 2); half.Before(due) {
		due = half
	}
	return due
}

// maybeFlush settles the queued results when they are due, when there are
// aheadSettleRows of them, or when no hand-over will add to them before they
// are due (next is the next hand-over; zero when none is planned).
func (s *settleBatch) maybeFlush(ctx context.Context, d *Dispatcher, next time.Time) {
	due := s.due()
	if due.IsZero() {
		return
	}
	if len(s.rows) < aheadSettleRows && d.clock.Now().Before(due) && !next.IsZero() && next.Before(due) {
		return
	}
	s.flush(ctx, d, false)
}

// wait returns once the settling in flight, if any, is over.
func (s *settleBatch) wait() {
	if s.running != nil {
		<-s.running
		s.running = nil
		s.rate.add(s.flying, s.took)
		s.flying = 0
	}
}

// flush settles the queued results in the background, after the settling
// in flight; with wait, it returns only once they are settled.
func (s *settleBatch) flush(ctx context.Context, d *Dispatcher, wait bool) {
	s.wait()
	if len(s.rows) > 0 {
		rows, results, by := s.rows, s.results, s.by
		s.rows, s.results = nil, nil
		done := make(chan struct{})
		go func() {
			defer close(done)
			start := d.clock.Now()
			d.settle(ctx, rows, results, by)
			s.took = d.clock.Now().Sub(start)
		}()
		s.running, s.flying, s.flyBy = done, len(rows), by
	}
	if wait {
		s.wait()
	}
}

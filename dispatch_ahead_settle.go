package bus

import (
	"context"
	"time"
)

// settleBatch gathers the results of a look-ahead dispatcher's hand-overs
// and settles them together (see dispatcher.settle), one batch at a time in
// the background, so that the loop goes on handing rows over meanwhile.
type settleBatch struct {
	rows    []OutgoingMessage
	results []error
	by      time.Time     // settle before: the earliest lease's end, less a margin
	first   time.Time     // when the oldest result was added
	running chan struct{} // closed when the settling in flight is over; nil when none
}

// add queues results of rows for settling before by.
func (s *settleBatch) add(rows []OutgoingMessage, results []error, by, now time.Time) {
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
func (s *settleBatch) maybeFlush(ctx context.Context, d *dispatcher, next time.Time) {
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
	}
}

// flush settles the queued results in the background, after the settling
// in flight; with wait, it returns only once they are settled.
func (s *settleBatch) flush(ctx context.Context, d *dispatcher, wait bool) {
	s.wait()
	if len(s.rows) > 0 {
		rows, results, by := s.rows, s.results, s.by
		s.rows, s.results = nil, nil
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.settle(ctx, rows, results, by)
		}()
		s.running = done
	}
	if wait {
		s.wait()
	}
}

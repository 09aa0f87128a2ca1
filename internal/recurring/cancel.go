package recurring

import "time"

// Cut is what cancelling a schedule's ticks ahead changes in its record.
type Cut struct {
	Cancel []time.Time // ticks whose stored occurrences to cancel
	Ticks  []time.Time // the ticks the record keeps
	Last   time.Time   // the record's new Last
	Runs   int64       // the record's new Runs: a cancelled occurrence gives its run back
}

// Idle reports whether the cut changes nothing in a record in state s.
func (c Cut) Idle(s State) bool { return len(c.Cancel) == 0 && c.Last.Equal(s.Last) }

// CancelAhead plans the cancelling of the occurrences stored for ticks
// after now, for a pause. With restart (a new definition) it cancels those
// after now plus lookAhead instead (one due within the dispatchers'
// look-ahead may already be held, and goes out) and moves Last there, so
// the new definition's ticks are planned from then on. Without restart,
// a Last ahead of now moves back to now, so resuming plans the ticks after
// it again.
func CancelAhead(s State, now time.Time, lookAhead time.Duration, restart bool) Cut {
	cut := now
	if restart {
		cut = now.Add(max(lookAhead, 0))
	}
	c := Cut{Last: s.Last, Runs: s.Runs}
	for _, t := range s.Ticks {
		if t.After(cut) {
			c.Cancel = append(c.Cancel, t)
			c.Runs--
		} else {
			c.Ticks = append(c.Ticks, t)
		}
	}
	c.Runs = max(c.Runs, 0)
	if restart || s.Last.After(now) {
		c.Last = cut // the ticks after it are planned again
	}
	return c
}

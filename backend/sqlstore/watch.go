package sqlstore

import (
	"context"
	"sync"
	"time"
)

// Claimers is the set of transports the dispatchers of one store claim
// for, which WatchDue polls. It is safe for concurrent use.
type Claimers struct {
	mu  sync.Mutex
	set map[string]struct{}
}

// Note remembers that a dispatcher of transport uses the store.
func (c *Claimers) Note(transport string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = map[string]struct{}{}
	}
	c.set[transport] = struct{}{}
}

// List returns the transports noted.
func (c *Claimers) List() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.set))
	for t := range c.set {
		out = append(out, t)
	}
	return out
}

// Watch is how WatchDue polls a database that cannot notify.
type Watch struct {
	// Interval between polls; negative: no watch. It must be set.
	Interval time.Duration
	// Changes, if set, returns for each WatchDue call a function that
	// reports whether another connection committed since its last call
	// (SQLite's data_version): WatchDue then wakes the dispatcher with the
	// earliest next due time of the claimers. Nil: WatchDue wakes it for
	// each transport whose next due time changed.
	Changes func() func(ctx context.Context) (bool, error)
}

// WatchDue lets this process's dispatcher wake for rows that other
// processes store (bus.DueNotifier). Every Watch.Interval it reads the
// next due time of each transport this store's dispatchers have claimed
// for (NextDueOutgoing's query), and calls wake when it changed: a row
// stored elsewhere, due before what the dispatcher planned, wakes it
// within about one interval plus a query. It holds no connection between
// polls. It returns nil when ctx ends, and an error when the database
// cannot be read (the dispatcher keeps polling and calls it again later).
func (s *Scheduled) WatchDue(ctx context.Context, wake func(due time.Time)) error {
	w := s.c.Watch
	if w.Interval <= 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	last := map[string]time.Time{}
	var changed func(ctx context.Context) (bool, error)
	if w.Changes != nil {
		changed = w.Changes()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.poll(ctx, changed, last, wake); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return s.d.Errorf("watch: %w", err)
		}
	}
}

// poll is one look of WatchDue; last holds the due times woken for.
func (s *Scheduled) poll(ctx context.Context, changed func(ctx context.Context) (bool, error),
	last map[string]time.Time, wake func(due time.Time)) error {
	if changed != nil {
		if ok, err := changed(ctx); err != nil || !ok {
			return err
		}
	}
	var earliest time.Time
	found := false
	for _, tr := range s.c.Claimers.List() {
		next, ok, err := s.nextDue(ctx, tr)
		if err != nil {
			return err
		}
		switch {
		case changed != nil:
			if ok && (!found || next.Before(earliest)) {
				earliest, found = next, true
			}
		case !ok:
			delete(last, tr)
		default:
			if prev, seen := last[tr]; !seen || !prev.Equal(next) {
				last[tr] = next
				wake(next)
			}
		}
	}
	if found {
		wake(earliest)
	}
	return nil
}

package mysql

import (
	"context"
	"fmt"
	"time"
)

// WatchDue lets this process's dispatcher wake for rows that other
// processes store (MySQL and MariaDB have no LISTEN/NOTIFY). Every
// Options.WatchInterval it reads the next due time of each transport this
// Persistence has claimed for, one probe of the claim index each
// (NextDueOutgoing's query), and calls wake when it changed since the
// last poll: a row stored elsewhere, due before what the dispatcher
// planned, wakes it within about one interval plus a query. It holds no
// connection between polls. It returns nil when ctx ends, and an error
// when the database cannot be read (the dispatcher keeps polling and
// calls it again later).
func (p *Persistence) WatchDue(ctx context.Context, wake func(due time.Time)) error {
	if p.opts.WatchInterval < 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(p.opts.WatchInterval)
	defer tick.Stop()
	last := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, tr := range p.claimers() {
			next, ok, err := p.nextDue(ctx, tr)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("mysql: watch: %w", err)
			}
			if !ok {
				delete(last, tr)
				continue
			}
			if prev, seen := last[tr]; !seen || !prev.Equal(next) {
				last[tr] = next
				wake(next)
			}
		}
	}
}

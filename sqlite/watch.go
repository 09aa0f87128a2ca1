package sqlite

import (
	"context"
	"fmt"
	"time"
)

// WatchDue lets the dispatcher of this process wake for rows that other
// processes store in the same file. Every Options.WatchInterval it reads
// PRAGMA data_version, which changes when another connection has committed;
// then it calls wake with the next due time of the transports this
// Persistence has claimed for (rows of other transports are not its
// dispatcher's to send). Commits of this Persistence do not count: the bus
// wakes its own dispatcher for those, except for rows stored in a caller's
// transaction (WithTx), whose commit the bus does not see: for those it
// wakes too. It returns nil when ctx ends, and an
// error when the database cannot be read.
func (p *Persistence) WatchDue(ctx context.Context, wake func(due time.Time)) error {
	if p.watch < 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(p.watch)
	defer tick.Stop()
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var version int64
		if err := p.db.QueryRowContext(ctx, "PRAGMA data_version").Scan(&version); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sqlite: watch: %w", err)
		}
		// A caller's transaction through this handle does not change
		// data_version: StoreOutgoingInCallerTx flags it instead. The
		// query above waited for that transaction to end, if it was still
		// open (the pool holds one connection).
		local := p.stored.Swap(false)
		changed := local || (last >= 0 && version != last)
		last = version
		if !changed {
			continue
		}
		next, ok, err := p.nextDueOfClaimers(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sqlite: watch: %w", err)
		}
		if ok {
			wake(next)
		}
	}
}

// noteTransport remembers that a dispatcher of transport uses this
// Persistence, so that WatchDue wakes it for that transport's rows.
func (p *Persistence) noteTransport(transport string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transports[transport] = struct{}{}
}

// nextDueOfClaimers is the earliest next due time among the transports
// noted by noteTransport; false when there is none (or no transport yet).
func (p *Persistence) nextDueOfClaimers(ctx context.Context) (time.Time, bool, error) {
	p.mu.Lock()
	transports := make([]string, 0, len(p.transports))
	for t := range p.transports {
		transports = append(transports, t)
	}
	p.mu.Unlock()
	var earliest time.Time
	found := false
	for _, t := range transports {
		next, ok, err := p.nextDue(ctx, t)
		if err != nil {
			return time.Time{}, false, err
		}
		if ok && (!found || next.Before(earliest)) {
			earliest, found = next, true
		}
	}
	return earliest, found, nil
}

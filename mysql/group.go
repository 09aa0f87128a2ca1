package mysql

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/postbus/bus"
)

// Group commit of StoreOutgoing: every autocommitted INSERT pays a redo
// log flush (innodb_flush_log_at_trx_commit=1), so the rows of concurrent
// calls share INSERTs. A call that finds fewer than groupInFlight inserts
// running inserts at once with whatever is queued (a lone call is one
// round trip); otherwise it queues. An insert that ends wakes its callers
// with the result and hands the next queued group to the first queued
// call, which inserts it: every caller returns as soon as its own rows are
// committed, and no goroutine of the store's own runs.

// Bounds of group commit: inserts running at once, and rows per group.
const (
	groupInFlight = 2
	groupRows     = 2000
)

// groupTimeout bounds an insert that carries other callers' rows: it runs
// on none of their contexts, so that one caller giving up does not fail
// the others.
const groupTimeout = time.Minute

type grouper struct {
	flush func(ctx context.Context, rows []bus.OutgoingMessage) error

	mu       sync.Mutex
	inFlight int
	queue    []*groupCall
}

// groupCall is one queued StoreOutgoing call.
type groupCall struct {
	rows []bus.OutgoingMessage
	done chan groupOutcome // buffered: receives exactly one outcome
}

// groupOutcome is the result of the insert that carried a call's rows, or
// a group the call must now insert itself (lead).
type groupOutcome struct {
	err  error
	lead []*groupCall
}

func (g *grouper) store(ctx context.Context, rows []bus.OutgoingMessage) error {
	c := &groupCall{rows: rows, done: make(chan groupOutcome, 1)}
	g.mu.Lock()
	if g.inFlight < groupInFlight {
		g.inFlight++
		group := g.takeLocked(c)
		g.mu.Unlock()
		return g.lead(ctx, group)
	}
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	var o groupOutcome
	select {
	case o = <-c.done:
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.queue, c); i >= 0 {
			g.queue = slices.Delete(g.queue, i, i+1)
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Unlock()
		o = <-c.done // its rows are in an insert already: wait for it
	}
	if o.lead != nil {
		return g.lead(ctx, o.lead)
	}
	return o.err
}

// takeLocked returns first and the queued calls after it whose rows fit
// in groupRows, and removes those from the queue.
func (g *grouper) takeLocked(first *groupCall) []*groupCall {
	group, n, rows := []*groupCall{first}, 0, len(first.rows)
	for n < len(g.queue) && rows+len(g.queue[n].rows) <= groupRows {
		rows += len(g.queue[n].rows)
		group = append(group, g.queue[n])
		n++
	}
	g.queue = slices.Delete(g.queue, 0, n)
	return group
}

// lead inserts group, whose first call is the caller's, tells the others,
// and hands the next queued group to its first call.
func (g *grouper) lead(ctx context.Context, group []*groupCall) error {
	var err error
	if len(group) == 1 {
		err = g.flush(ctx, group[0].rows)
	} else {
		var rows []bus.OutgoingMessage
		for _, c := range group {
			rows = append(rows, c.rows...)
		}
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
		err = g.flush(gctx, rows)
		cancel()
	}
	for _, c := range group[1:] {
		c.done <- groupOutcome{err: err}
	}
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.inFlight--
		g.mu.Unlock()
		return err
	}
	next := g.queue[0]
	g.queue = g.queue[1:]
	nextGroup := g.takeLocked(next)
	g.mu.Unlock()
	next.done <- groupOutcome{lead: nextGroup}
	return err
}

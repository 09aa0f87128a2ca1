package sqlstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Grouper shares the statements and commits of concurrent stores (group
// commit) without a goroutine of its own: every commit pays a log flush,
// so the rows of concurrent calls share one. A call that finds fewer than
// MaxInFlight flushes running flushes at once, taking along whatever is
// queued (a lone call is one round trip); otherwise it queues. A flush
// that ends wakes its callers with the result and hands the next queued
// group to the first queued call, which flushes it: every caller returns
// as soon as its own rows are committed. A failure fails every call of
// the group, none of whose rows is then stored.
type Grouper[T any] struct {
	maxRows, maxInFlight int
	timeout              time.Duration
	flush                func(ctx context.Context, rows []T) error

	mu       sync.Mutex
	inFlight int
	queue    []*groupCall[T]
}

// NewGrouper returns a Grouper that flushes groups of at most maxRows
// rows (a single larger call is one group), maxInFlight at once. A flush
// that carries several calls' rows runs on none of their contexts, so
// that one caller giving up does not fail the others: with a positive
// timeout, on a context of its own that ends after timeout; otherwise on
// one that ends when every caller of the group has given up.
func NewGrouper[T any](maxRows, maxInFlight int, timeout time.Duration, flush func(ctx context.Context, rows []T) error) *Grouper[T] {
	return &Grouper[T]{maxRows: maxRows, maxInFlight: maxInFlight, timeout: timeout, flush: flush}
}

// groupCall is one queued Store call.
type groupCall[T any] struct {
	ctx  context.Context
	rows []T
	done chan groupOutcome[T] // buffered: receives exactly one outcome
}

// groupOutcome is the result of the flush that carried a call's rows, or
// a group the call must now flush itself (lead).
type groupOutcome[T any] struct {
	err  error
	lead []*groupCall[T]
}

// Store flushes rows, alone or with the rows of concurrent calls. A call
// whose ctx ends while it is queued returns ctx.Err() and its rows are
// not flushed; once they are part of a flush, it waits for the flush.
func (g *Grouper[T]) Store(ctx context.Context, rows []T) error {
	c := &groupCall[T]{ctx: ctx, rows: rows, done: make(chan groupOutcome[T], 1)}
	g.mu.Lock()
	if g.inFlight < g.maxInFlight {
		g.inFlight++
		group := g.takeLocked(c)
		g.mu.Unlock()
		return g.lead(group)
	}
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	var o groupOutcome[T]
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
		o = <-c.done // its rows are in a flush already: wait for it
	}
	if o.lead != nil {
		return g.lead(o.lead)
	}
	return o.err
}

// takeLocked returns first and the queued calls after it whose rows fit
// in maxRows, and removes those from the queue.
func (g *Grouper[T]) takeLocked(first *groupCall[T]) []*groupCall[T] {
	group, n, rows := []*groupCall[T]{first}, 0, len(first.rows)
	for n < len(g.queue) && rows+len(g.queue[n].rows) <= g.maxRows {
		rows += len(g.queue[n].rows)
		group = append(group, g.queue[n])
		n++
	}
	g.queue = slices.Delete(g.queue, 0, n)
	return group
}

// lead flushes group, whose first call is the caller's, tells the
// others, and hands the next queued group to its first call.
func (g *Grouper[T]) lead(group []*groupCall[T]) error {
	err := g.run(group)
	for _, c := range group[1:] {
		c.done <- groupOutcome[T]{err: err}
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
	next.done <- groupOutcome[T]{lead: nextGroup}
	return err
}

func (g *Grouper[T]) run(group []*groupCall[T]) error {
	if len(group) == 1 {
		return g.flush(group[0].ctx, group[0].rows)
	}
	n := 0
	for _, c := range group {
		n += len(c.rows)
	}
	rows := make([]T, 0, n)
	for _, c := range group {
		rows = append(rows, c.rows...)
	}
	ctx, cancel := g.context(group)
	defer cancel()
	return g.flush(ctx, rows)
}

// context returns the context of a flush that carries group's rows.
func (g *Grouper[T]) context(group []*groupCall[T]) (context.Context, context.CancelFunc) {
	if g.timeout > 0 {
		return context.WithTimeout(context.WithoutCancel(group[0].ctx), g.timeout)
	}
	return groupContext(group)
}

// groupContext returns a context that ends when the contexts of every
// call in group have ended.
func groupContext[T any](group []*groupCall[T]) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(group))
	for i, c := range group {
		ctxs[i] = c.ctx
	}
	return AllDone(context.WithoutCancel(group[0].ctx), ctxs)
}

// AllDone returns a context of parent that also ends when every one of
// members has ended: the context of work done for several callers, which
// goes on while one of them still waits for its outcome.
func AllDone(parent context.Context, members []context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	var live atomic.Int64
	live.Store(int64(len(members)))
	stops := make([]func() bool, len(members))
	for i, m := range members {
		stops[i] = context.AfterFunc(m, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

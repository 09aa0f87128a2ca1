package postgres

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// batcher groups the rows of concurrent StoreOutgoing calls into shared
// INSERTs without a goroutine of its own. A call that finds fewer than
// maxInFlight inserts running becomes a leader and inserts at once, taking
// along whatever is queued (a lone call is one round trip). Otherwise it
// queues. When a leader's insert ends it wakes its followers with the
// result and hands leadership, with the next group from the queue, to the
// first queued call, so every caller's goroutine returns as soon as its own
// rows are committed.
type batcher[T any] struct {
	maxRows     int
	maxInFlight int
	flush       func(ctx context.Context, msgs []T) error

	mu       sync.Mutex
	inFlight int
	queue    []*call[T]
}

// call is one StoreOutgoing call waiting in the batcher.
type call[T any] struct {
	ctx  context.Context
	msgs []T
	done chan outcome[T] // buffered; receives exactly one outcome
}

// outcome ends a queued call's wait: either the result of the insert that
// carried its rows, or a group it must now insert as the leader.
type outcome[T any] struct {
	err  error
	lead []*call[T]
}

func newBatcher[T any](maxRows, maxInFlight int, flush func(context.Context, []T) error) *batcher[T] {
	return &batcher[T]{maxRows: maxRows, maxInFlight: maxInFlight, flush: flush}
}

func (b *batcher[T]) store(ctx context.Context, msgs []T) error {
	c := &call[T]{ctx: ctx, msgs: msgs, done: make(chan outcome[T], 1)}
	b.mu.Lock()
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		group := b.takeLocked(c)
		b.mu.Unlock()
		return b.lead(group)
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case o := <-c.done:
		return b.settle(o)
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Unlock()
		// Already part of a group: its insert runs on a context that ends
		// once every member's context has ended, so this wait is short.
		return b.settle(<-c.done)
	}
}

func (b *batcher[T]) settle(o outcome[T]) error {
	if o.lead != nil {
		return b.lead(o.lead)
	}
	return o.err
}

// takeLocked returns first followed by queued calls, in order, while their
// rows fit in maxRows, and removes those from the queue.
func (b *batcher[T]) takeLocked(first *call[T]) []*call[T] {
	group := []*call[T]{first}
	rows := len(first.msgs)
	n := 0
	for n < len(b.queue) && rows+len(b.queue[n].msgs) <= b.maxRows {
		rows += len(b.queue[n].msgs)
		group = append(group, b.queue[n])
		n++
	}
	b.queue = slices.Delete(b.queue, 0, n)
	return group
}

// lead inserts group (whose first call is the caller's), reports to the
// followers and passes leadership on.
func (b *batcher[T]) lead(group []*call[T]) error {
	err := b.run(group)
	for _, c := range group[1:] {
		c.done <- outcome[T]{err: err}
	}
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return err
	}
	next := b.queue[0]
	b.queue = b.queue[1:]
	nextGroup := b.takeLocked(next)
	b.mu.Unlock()
	next.done <- outcome[T]{lead: nextGroup}
	return err
}

func (b *batcher[T]) run(group []*call[T]) error {
	if len(group) == 1 {
		return b.flush(group[0].ctx, group[0].msgs)
	}
	n := 0
	for _, c := range group {
		n += len(c.msgs)
	}
	rows := make([]T, 0, n)
	for _, c := range group {
		rows = append(rows, c.msgs...)
	}
	ctx, cancel := groupContext(group)
	defer cancel()
	return b.flush(ctx, rows)
}

// groupContext returns a context that ends when the contexts of every call
// in group have ended: one caller giving up must not fail the others.
func groupContext[T any](group []*call[T]) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	var live atomic.Int32
	live.Store(int32(len(group)))
	stops := make([]func() bool, len(group))
	for i, c := range group {
		stops[i] = context.AfterFunc(c.ctx, func() {
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

package driver_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/driver"
)

// chanTransport is a complete bus.Transport in about 150 lines: an
// in-process broker (queues of messages with delivery tags, held until
// acknowledged) and a Receive built on the driver kit. A transport for a
// real broker has the same shape; its broker calls replace the queue's
// methods.
type chanTransport struct {
	mu     sync.Mutex
	queues map[string]*chanQueue
	subs   map[string]map[string]bool // event type -> subscribed queues
}

var _ bus.Transport = (*chanTransport)(nil)

func newChanTransport() *chanTransport {
	return &chanTransport{queues: map[string]*chanQueue{}, subs: map[string]map[string]bool{}}
}

func (t *chanTransport) queue(name string) *chanQueue {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queues[name]
	if q == nil {
		q = &chanQueue{held: map[uint64]delivery{}, more: make(chan struct{}, 1)}
		t.queues[name] = q
	}
	return q
}

// Provision creates the queues and subscriptions of top.
func (t *chanTransport) Provision(_ context.Context, top bus.Topology) error {
	for _, q := range append([]string{top.Queue}, top.Queues...) {
		t.queue(q)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, typ := range top.Events {
		if t.subs[typ] == nil {
			t.subs[typ] = map[string]bool{}
		}
		t.subs[typ][top.Queue] = true
	}
	return nil
}

// Send appends a copy of env to queue.
func (t *chanTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.queue(queue).push(env.Clone())
	return nil
}

// Publish appends a copy of env to every queue subscribed to its type.
func (t *chanTransport) Publish(ctx context.Context, env *bus.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	var targets []string
	for q := range t.subs[env.Type] {
		targets = append(targets, q)
	}
	t.mu.Unlock()
	for _, q := range targets {
		t.queue(q).push(env.Clone())
	}
	return nil
}

// Receive is the part the kit writes for us: a pool of
// opts.Concurrency workers starting messages in queue order, as many
// read ahead, acknowledgements in batches, and at the end unstarted
// messages handed back and handlings in flight settled.
func (t *chanTransport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	q := t.queue(queue)
	hctx := context.WithoutCancel(ctx) // handlings outlive Receive's ctx
	acks, err := driver.NewBatcher(driver.BatcherOptions[uint64]{Max: 64, Flush: q.ack})
	if err != nil {
		return fmt.Errorf("chan: receive %s: %w", queue, err)
	}
	defer acks.Close() // after pool.Close: the last handlings' acks
	pool, err := driver.NewPool(driver.PoolOptions[delivery]{
		Concurrency: opts.Concurrency,
		Prefetch:    opts.Concurrency,
		Handle: func(d delivery) {
			if err := h(hctx, d.env); err != nil {
				q.nack(d.tag) // the broker delivers it again
				return
			}
			acks.Add(d.tag)
		},
		Unstarted: func(d delivery) { q.nack(d.tag) },
	})
	if err != nil {
		return fmt.Errorf("chan: receive %s: %w", queue, err)
	}
	defer pool.Close()
	for {
		n := pool.Acquire(ctx, pool.Capacity()) // room for n messages
		if n == 0 {
			return nil // ctx ended
		}
		got := q.take(ctx, n)
		pool.Release(n - len(got))
		for _, d := range got {
			pool.Put(d)
		}
	}
}

// delivery is a message handed to a consumer, named by its tag.
type delivery struct {
	tag uint64
	env *bus.Envelope
}

// chanQueue is the broker side of one queue.
type chanQueue struct {
	mu    sync.Mutex
	next  uint64
	ready []delivery          // in tag order
	held  map[uint64]delivery // delivered, not settled
	more  chan struct{}       // signalled when ready grows
}

func (q *chanQueue) push(env *bus.Envelope) {
	q.mu.Lock()
	q.next++
	q.ready = append(q.ready, delivery{q.next, env})
	q.mu.Unlock()
	q.signal()
}

func (q *chanQueue) signal() {
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// take waits for a message, then delivers up to n; nil when ctx ended.
func (q *chanQueue) take(ctx context.Context, n int) []delivery {
	for {
		q.mu.Lock()
		if len(q.ready) > 0 {
			got := slices.Clone(q.ready[:min(n, len(q.ready))])
			q.ready = q.ready[len(got):]
			for _, d := range got {
				q.held[d.tag] = d
			}
			more := len(q.ready) > 0
			q.mu.Unlock()
			if more {
				q.signal() // another consumer of the queue may take the rest
			}
			return got
		}
		q.mu.Unlock()
		select {
		case <-q.more:
		case <-ctx.Done():
			q.signal() // pass the signal on to a consumer still running
			return nil
		}
	}
}

// ack forgets settled messages: one broker call for a batch.
func (q *chanQueue) ack(tags []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, tag := range tags {
		delete(q.held, tag)
	}
}

// nack makes a held message ready again, in its place by tag.
func (q *chanQueue) nack(tag uint64) {
	q.mu.Lock()
	d, ok := q.held[tag]
	delete(q.held, tag)
	if ok {
		i, _ := slices.BinarySearchFunc(q.ready, tag, func(x delivery, t uint64) int { return cmpUint(x.tag, t) })
		q.ready = slices.Insert(q.ready, i, d)
	}
	q.mu.Unlock()
	q.signal()
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The example transport keeps the whole transport contract.
func TestChanTransportPassesTheTransportSuite(t *testing.T) {
	t.Parallel()
	tr := newChanTransport()
	bustest.TransportTests(t, func(*testing.T) bus.Transport { return tr }, bustest.Features{NativeRedelivery: true})
}

type greet struct{ Name string }

// A bus on a transport built with the kit.
func Example_transport() {
	ctx := context.Background()
	b, err := bus.New(bus.Config{Endpoint: "greeter", Transport: newChanTransport(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make(chan string, 1)
	if err := bus.Handle(b, func(_ context.Context, m greet) error { got <- m.Name; return nil }); err != nil {
		fmt.Println(err)
		return
	}
	if err := bus.Route[greet](b, "greeter"); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = b.Stop(ctx) }()
	if err := b.Send(ctx, greet{Name: "Ada"}); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case name := <-got:
		fmt.Println("hello,", name)
	case <-time.After(30 * time.Second):
		fmt.Println("nothing arrived")
	}
	// Output: hello, Ada
}

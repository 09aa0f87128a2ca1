package bus

import (
	"context"
	"sync"
)

var (
	_ Transport         = (*MemoryTransport)(nil)
	_ TransportIdentity = (*MemoryTransport)(nil)
	_ Pinger            = (*MemoryTransport)(nil)
)

// MemoryTransport is the in-process transport and the default when
// Config.Transport is nil. Buses given the same *MemoryTransport talk to each
// other: that is how two endpoints, or several instances of one endpoint,
// share queues in one process. Messages live in memory only.
type MemoryTransport struct {
	mu     sync.Mutex
	queues map[string]*memQueue
	subs   map[string]map[string]struct{} // event type -> subscribed queues
}

// NewMemoryTransport returns an empty in-memory transport.
func NewMemoryTransport() *MemoryTransport {
	return &MemoryTransport{queues: map[string]*memQueue{}, subs: map[string]map[string]struct{}{}}
}

// Identity returns "memory": rows scheduled through an in-memory transport
// are dispatched by any bus on the same store that uses one.
func (m *MemoryTransport) Identity() string { return memoryIdentity }

const memoryIdentity = "memory"

// Ping returns ctx's error, if any: the queues are in this process.
func (m *MemoryTransport) Ping(ctx context.Context) error { return ctx.Err() }

// Provision creates the queues and subscriptions of t.
func (m *MemoryTransport) Provision(_ context.Context, t Topology) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queueLocked(t.Queue)
	for _, q := range t.Queues {
		m.queueLocked(q)
	}
	for _, typ := range t.Events {
		if m.subs[typ] == nil {
			m.subs[typ] = map[string]struct{}{}
		}
		m.subs[typ][t.Queue] = struct{}{}
	}
	return nil
}

// Send appends a copy of env to queue, creating the queue if needed.
func (m *MemoryTransport) Send(ctx context.Context, queue string, env *Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.queue(queue).push(env.Clone())
	return nil
}

// Publish appends a copy of env to every queue subscribed to env.Type.
func (m *MemoryTransport) Publish(ctx context.Context, env *Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	targets := make([]*memQueue, 0, len(m.subs[env.Type]))
	for q := range m.subs[env.Type] {
		targets = append(targets, m.queueLocked(q))
	}
	m.mu.Unlock()
	for _, q := range targets {
		q.push(env.Clone())
	}
	return nil
}

// Receive runs opts.Concurrency workers on queue until ctx ends. A message
// whose handler fails goes back to the front of the queue.
func (m *MemoryTransport) Receive(ctx context.Context, queue string, opts ReceiveOptions, h DeliveryHandler) error {
	q := m.queue(queue)
	hctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range max(opts.Concurrency, 1) {
		wg.Go(func() {
			for {
				env, ok := q.pop(ctx)
				if !ok {
					return
				}
				if err := h(hctx, env); err != nil {
					q.pushFront(env)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// Len returns the number of messages waiting in queue (for tests and tools).
func (m *MemoryTransport) Len(queue string) int {
	q := m.queue(queue)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}

func (m *MemoryTransport) queue(name string) *memQueue {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queueLocked(name)
}

func (m *MemoryTransport) queueLocked(name string) *memQueue {
	q := m.queues[name]
	if q == nil {
		q = &memQueue{signal: make(chan struct{}, 1)}
		m.queues[name] = q
	}
	return q
}

// memQueue is an unbounded FIFO. Waiting workers are woken one at a time
// through signal; a worker that takes an item and sees more re-signals, so
// a burst wakes every idle worker without a thundering herd.
type memQueue struct {
	mu     sync.Mutex
	items  []*Envelope
	head   int
	signal chan struct{}
}

func (q *memQueue) push(e *Envelope) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	q.wake()
}

func (q *memQueue) pushFront(e *Envelope) {
	q.mu.Lock()
	if q.head > 0 {
		q.head--
		q.items[q.head] = e
	} else {
		q.items = append([]*Envelope{e}, q.items...)
	}
	q.mu.Unlock()
	q.wake()
}

func (q *memQueue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *memQueue) pop(ctx context.Context) (*Envelope, bool) {
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		q.mu.Lock()
		if q.head < len(q.items) {
			e := q.items[q.head]
			q.items[q.head] = nil
			q.head++
			more := q.head < len(q.items)
			if !more || q.head > 1024 && q.head*2 > len(q.items) {
				q.items = append(q.items[:0:0], q.items[q.head:]...)
				q.head = 0
			}
			q.mu.Unlock()
			if more {
				q.wake()
			}
			return e, true
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-ctx.Done():
			q.wake() // pass the signal on to a worker that is still running
			return nil, false
		}
	}
}

package driver

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// ErrNoHandle is returned by NewPool when PoolOptions.Handle is nil.
var ErrNoHandle = errors.New("driver: pool needs a Handle function")

// Pool is the receive worker pool of a transport: the part of a Receive
// loop that every broker needs the same way. A receive loop fetches
// messages from its broker and puts them into the pool; the pool runs at
// most Concurrency handlings at once, starts them in the order the
// messages were put (first in, first out, across all workers), and bounds
// what the loop may fetch ahead of the workers to Prefetch more messages.
// At shutdown it hands back the messages it had not started and waits for
// the handlings in flight.
//
// # Use
//
// A receive loop with a pool runs like this:
//
//	p, err := driver.NewPool(driver.PoolOptions[*msg]{
//		Concurrency: opts.Concurrency,
//		Prefetch:    prefetch,
//		Handle:      r.handle,    // calls the bus.DeliveryHandler, then settles
//		Unstarted:   r.giveBack,  // nack or release a message never started
//	})
//	for ctx.Err() == nil {
//		n := p.Acquire(ctx, maxBatch) // waits for room; 0 when ctx ended
//		if n == 0 {
//			break
//		}
//		msgs, err := fetch(ctx, n)    // at most n
//		p.Release(n - len(msgs))      // give back the room not used
//		for _, m := range msgs {
//			p.Put(m)                  // uses one acquired slot each
//		}
//	}
//	p.Close() // hands back what was not started, waits for the rest
//
// A loop fed by a client's callback (a NATS pull, an AMQP delivery
// channel) calls Acquire(ctx, 1) and Put for each message. A loop whose
// fetch is a costly round trip (a database claim) calls AcquireBatch to
// fetch in batches while the workers are busy.
//
// # Order
//
// Messages are started in Put order. With Concurrency 1 a queue is
// therefore handled strictly in the order it was fetched: no message read
// ahead can overtake an earlier one, because the read-ahead messages wait
// in one FIFO queue rather than each in a goroutine of its own racing for
// a free worker. With Concurrency above 1 starts are in order and
// completions are not.
//
// # Keys
//
// With PoolOptions.Key, messages of one key (a Kafka record key within its
// partition, an SQS FIFO message group, an ordering key) start in Put
// order and one at a time: the next starts once the previous one's
// settlement is reported. A message waiting for its key holds no worker
// and holds up no message of another key or without one: the workers take
// the oldest message that may start. Drop takes queued messages out (a
// revoked partition's), so they never start.
//
// # Slots
//
// A pool has Concurrency+Prefetch slots. A slot is taken by Acquire (or
// TryAcquire, AcquireBatch) before the fetch, used by Put, and given back
// when Handle (or Unstarted) returns for that message, or by Release when
// the fetch brought fewer messages than acquired, or by Drop. So at most
// Concurrency+Prefetch messages are ever in the receiver's hands, and a
// broker that counts unacknowledged messages (a lease, a visibility
// timeout, a prefetch window) never sees more.
//
// # Settlement
//
// Handle settles its message itself (ack, nack, retry later,
// dead-letter), at once or through a Batcher that groups
// acknowledgements into one broker call; Ordered tracks the highest
// contiguous settled position for brokers that commit offsets. With
// PoolOptions.HoldUntilSettled, Handle may return before the settlement
// ends, freeing its worker for the next message: the message keeps its
// slot (and its key) until the transport calls Settled, so the read-ahead
// bounds the messages claimed and not yet settled.
//
// # Shutdown
//
// Close is called once the loop has stopped putting messages. It stops
// starting messages: those still queued go to Unstarted (in Put order,
// while the busy workers finish), then it waits for the handlings in
// flight. Without Unstarted, queued messages are handled before Close
// returns, as if nothing had stopped.
type Pool[M any] struct {
	handle    func(M)
	unstarted func(M)
	key       func(M) (string, bool)
	hold      bool
	conc      int
	capacity  int
	workers   sync.WaitGroup
	closeOnce sync.Once

	mu      sync.Mutex
	ready   *sync.Cond      // signalled when a message may start, or at Close
	queue   []queued[M]     // put and not started, in Put order
	busy    map[string]bool // keys with a message started and not settled
	held    int             // slots taken
	running int             // Handle calls in progress
	closing bool
	changed chan struct{} // closed when a slot or a worker frees; nil while no one waits
	line    []uint64      // the tickets of the AcquireBatch calls waiting, in arrival order
	ticket  uint64        // the next ticket
}

// queued is a message put and not started, with its key.
type queued[M any] struct {
	m     M
	key   string
	keyed bool
}

// PoolOptions configure a Pool. Zero values mean the documented defaults.
type PoolOptions[M any] struct {
	// Concurrency is the number of workers, the bound of Handle calls at
	// once. Default (and minimum) 1.
	Concurrency int
	// Prefetch is how many messages may be held beyond Concurrency:
	// fetched and waiting for a worker. Default 0: the loop fetches only
	// for idle workers. Negative values count as 0.
	Prefetch int
	// Handle runs the transport's handling of one message: it calls the
	// bus.DeliveryHandler with the message's delivery ctx and settles the
	// message. It runs on a worker goroutine. Required.
	Handle func(m M)
	// Unstarted receives, during Close, each message put but not started,
	// in Put order: a transport hands it back to the broker (a nack, a
	// release of its lease) or leaves it to its lease. Nil: such messages
	// are handled by Handle before Close returns.
	Unstarted func(m M)
	// HoldUntilSettled keeps a message's slot, and its key, after Handle
	// returns, until the transport calls Settled for it: for a transport
	// whose settlement outlives the handler (a batched acknowledgement) and
	// whose broker counts the message until it ends. False: the slot and
	// the key are freed when Handle returns.
	HoldUntilSettled bool
	// Key returns the ordering key of a message, and false for a message
	// without one. Messages of one key start in Put order, one at a time,
	// each once the previous one's settlement was reported (Handle
	// returned, or Settled with HoldUntilSettled). Nil: no keys, every
	// message may start as soon as a worker is free. It must return the
	// same for a message every time, and must not call the pool.
	Key func(m M) (key string, ok bool)
}

// NewPool starts a pool's workers. It returns ErrNoHandle when
// o.Handle is nil.
func NewPool[M any](o PoolOptions[M]) (*Pool[M], error) {
	if o.Handle == nil {
		return nil, ErrNoHandle
	}
	conc := max(o.Concurrency, 1)
	p := &Pool[M]{
		handle:    o.Handle,
		unstarted: o.Unstarted,
		key:       o.Key,
		hold:      o.HoldUntilSettled,
		conc:      conc,
		capacity:  conc + max(o.Prefetch, 0),
	}
	p.ready = sync.NewCond(&p.mu)
	if o.Key != nil {
		p.busy = map[string]bool{}
	}
	for range conc {
		p.workers.Go(p.run)
	}
	return p, nil
}

// Capacity returns the number of slots: Concurrency + Prefetch.
func (p *Pool[M]) Capacity() int { return p.capacity }

// Acquire waits for one free slot (callers waiting at once are served in
// the order they came), then takes as many more as are free,
// up to limit (at least 1), and returns how many it took. It returns 0,
// holding nothing, when ctx ended first.
func (p *Pool[M]) Acquire(ctx context.Context, limit int) int {
	return p.AcquireBatch(ctx, 1, limit)
}

// AcquireBatch is Acquire for a loop whose fetch costs a round trip: it
// waits until least slots are free (least is at most limit and
// Capacity), or until one is and a worker is idle with no message it may
// start, so an idle worker never waits for a batch to gather. Then it
// takes every free slot up to limit (at least 1) and returns how many it
// took; 0, holding nothing, when ctx ended first.
func (p *Pool[M]) AcquireBatch(ctx context.Context, least, limit int) int {
	limit = max(limit, 1)
	least = max(min(least, limit, p.capacity), 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	// Callers are served in turn: a loop that gives its slots back and
	// asks again at once queues behind the loops already waiting, as with
	// a channel's blocked senders, so no loop sharing the pool starves.
	t := p.ticket
	p.ticket++
	p.line = append(p.line, t)
	defer func() {
		p.line = slices.DeleteFunc(p.line, func(x uint64) bool { return x == t })
		p.notify() // the next in line looks again
	}()
	for ctx.Err() == nil {
		free := p.capacity - p.held
		if p.line[0] == t && (free >= least || free > 0 && p.running < p.conc && p.startable() < 0) {
			n := min(free, limit)
			p.held += n
			return n
		}
		changed := p.watch()
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	return 0
}

// Queued returns the number of messages put and not started yet.
func (p *Pool[M]) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Changed returns a channel that is closed the next time a slot frees, a
// Handle returns, or a worker takes the last message that could start
// while another worker is idle: a loop that waits for room on conditions
// of its own (the messages it holds, a notification) selects on it with
// its other events. Take it before looking at the pool, so no change is
// missed.
func (p *Pool[M]) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watch()
}

// TryAcquire takes as many free slots as there are, up to limit, without
// waiting, and returns how many it took.
func (p *Pool[M]) TryAcquire(limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.line) > 0 {
		return 0 // the slots that free go to the callers waiting first
	}
	n := max(min(p.capacity-p.held, limit), 0)
	p.held += n
	return n
}

// Release gives back n slots acquired and not used by Put.
func (p *Pool[M]) Release(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free(n)
}

// Put queues m for the workers. It uses a slot taken by Acquire or
// TryAcquire before, so it never waits; m is started after every message
// put before it (of its key, with PoolOptions.Key). Put must not be
// called after, or at the same time as, Close.
func (p *Pool[M]) Put(m M) {
	q := queued[M]{m: m}
	if p.key != nil {
		q.key, q.keyed = p.key(m)
	}
	p.mu.Lock()
	p.queue = append(p.queue, q)
	p.mu.Unlock()
	p.ready.Signal()
}

// Settled reports that the settlement of m, a message Handle was called
// for, has ended, successfully or not: with HoldUntilSettled it frees m's
// slot and lets the next message of m's key start. Call it once per such
// message, during or after its Handle. Without HoldUntilSettled it does
// nothing: the settlement ends when Handle returns.
func (p *Pool[M]) Settled(m M) {
	if !p.hold {
		return
	}
	q := queued[M]{m: m}
	if p.key != nil {
		q.key, q.keyed = p.key(m)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settled(q)
}

// Drop takes the queued messages that match out of the pool, before they
// start, and returns them in Put order; their slots are free again. A
// transport hands them back or forgets them (the records of a revoked
// partition). match runs with the pool locked and must not call it.
func (p *Pool[M]) Drop(match func(m M) bool) []M {
	p.mu.Lock()
	defer p.mu.Unlock()
	var dropped []M
	kept := p.queue[:0]
	for _, q := range p.queue {
		if match(q.m) {
			dropped = append(dropped, q.m)
		} else {
			kept = append(kept, q)
		}
	}
	clear(p.queue[len(kept):])
	p.queue = kept
	p.free(len(dropped))
	return dropped
}

// Close stops the pool: messages put and not started go to Unstarted
// (when set), handlings in flight finish, and Close returns when every
// worker has ended. It must be called once the receive loop has stopped
// putting messages; later calls do nothing.
func (p *Pool[M]) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		var back []queued[M]
		if p.unstarted != nil {
			back, p.queue = p.queue, nil
		}
		p.mu.Unlock()
		p.ready.Broadcast()
		// The queue goes back while the busy workers finish, so a slow
		// handler does not hold the others' messages.
		for _, q := range back {
			p.unstarted(q.m)
			p.Release(1)
		}
		p.workers.Wait()
	})
}

// run is one worker: it handles messages until the pool is closed and
// its queue empty.
func (p *Pool[M]) run() {
	for {
		q, ok := p.next()
		if !ok {
			return
		}
		p.handle(q.m)
		p.mu.Lock()
		p.running--
		if !p.hold {
			p.settled(q)
		}
		p.notify()
		p.mu.Unlock()
	}
}

// next waits for the oldest message that may start and takes it; false
// once the pool is closed and its queue empty.
func (p *Pool[M]) next() (queued[M], bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if i := p.startable(); i >= 0 {
			q := p.queue[i]
			if i == 0 {
				p.queue[0] = queued[M]{}
				p.queue = p.queue[1:]
			} else {
				p.queue = slices.Delete(p.queue, i, i+1)
			}
			if q.keyed {
				p.busy[q.key] = true
			}
			p.running++
			if p.startable() >= 0 {
				p.ready.Signal() // pass the wake-up on
			} else if p.running < p.conc {
				// Another worker stays idle with nothing to start, which
				// an AcquireBatch that saw this message queued waits for.
				p.notify()
			}
			return q, true
		}
		if p.closing && len(p.queue) == 0 {
			p.ready.Broadcast() // the workers still waiting end too
			return queued[M]{}, false
		}
		p.ready.Wait()
	}
}

// startable returns the index of the oldest queued message whose key is
// not busy, or -1; p.mu is held.
func (p *Pool[M]) startable() int {
	for i, q := range p.queue {
		if !q.keyed || !p.busy[q.key] {
			return i
		}
	}
	return -1
}

// settled frees the slot and the key of a started message; p.mu is held.
func (p *Pool[M]) settled(q queued[M]) {
	if q.keyed && p.busy[q.key] {
		delete(p.busy, q.key)
		p.ready.Signal()
	}
	p.free(1)
}

// free gives back n slots; p.mu is held.
func (p *Pool[M]) free(n int) {
	if n <= 0 {
		return
	}
	p.held = max(p.held-n, 0)
	p.notify()
}

// watch returns a channel closed at the next change of the free slots or
// the idle workers; p.mu is held.
func (p *Pool[M]) watch() <-chan struct{} {
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// notify wakes the waiters of watch; p.mu is held.
func (p *Pool[M]) notify() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

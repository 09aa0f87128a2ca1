package driver

import (
	"context"
	"errors"
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
// channel) calls Acquire(ctx, 1) and Put for each message.
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
// # Slots
//
// A pool has Concurrency+Prefetch slots. A slot is taken by Acquire (or
// TryAcquire) before the fetch, used by Put, and given back when Handle (or
// Unstarted) returns for that message, or by Release when the fetch
// brought fewer messages than acquired. So at most Concurrency+Prefetch
// messages are ever in the receiver's hands, and a broker that counts
// unacknowledged messages (a lease, a visibility timeout, a prefetch
// window) never sees more.
//
// # Settlement
//
// Handle settles its message itself (ack, nack, retry later,
// dead-letter), at once or through a Batcher that groups
// acknowledgements into one broker call; Ordered tracks the highest
// contiguous settled position for brokers that commit offsets.
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
	slots     chan struct{}
	work      chan M
	workers   sync.WaitGroup
	stopped   chan struct{}
	closeOnce sync.Once
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
}

// NewPool starts a pool's workers. It returns ErrNoHandle when
// o.Handle is nil.
func NewPool[M any](o PoolOptions[M]) (*Pool[M], error) {
	if o.Handle == nil {
		return nil, ErrNoHandle
	}
	conc := max(o.Concurrency, 1)
	hold := conc + max(o.Prefetch, 0)
	p := &Pool[M]{
		handle:    o.Handle,
		unstarted: o.Unstarted,
		slots:     make(chan struct{}, hold),
		work:      make(chan M, hold),
		stopped:   make(chan struct{}),
	}
	for range conc {
		p.workers.Go(p.run)
	}
	return p, nil
}

// Capacity returns the number of slots: Concurrency + Prefetch.
func (p *Pool[M]) Capacity() int { return cap(p.slots) }

// Acquire waits for one free slot, then takes as many more as are free,
// up to limit (at least 1), and returns how many it took. It returns 0,
// holding nothing, when ctx ended first.
func (p *Pool[M]) Acquire(ctx context.Context, limit int) int {
	if ctx.Err() != nil {
		return 0
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	return 1 + p.TryAcquire(max(limit, 1)-1)
}

// TryAcquire takes as many free slots as there are, up to limit, without
// waiting, and returns how many it took.
func (p *Pool[M]) TryAcquire(limit int) int {
	n := 0
	for n < limit {
		select {
		case p.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// Release gives back n slots acquired and not used by Put.
func (p *Pool[M]) Release(n int) {
	for range n {
		<-p.slots
	}
}

// Put queues m for the workers. It uses a slot taken by Acquire or
// TryAcquire before, so it never waits; m is started after every message
// put before it. Put must not be called after, or at the same time as,
// Close.
func (p *Pool[M]) Put(m M) { p.work <- m }

// Close stops the pool: messages put and not started go to Unstarted
// (when set), handlings in flight finish, and Close returns when every
// worker has ended. It must be called once the receive loop has stopped
// putting messages; later calls do nothing.
func (p *Pool[M]) Close() {
	p.closeOnce.Do(func() {
		if p.unstarted != nil {
			close(p.stopped)
			// One more worker hands back the queue while the busy ones
			// finish, so a slow handler does not hold the others' messages.
			p.workers.Go(p.run)
		}
		close(p.work)
		p.workers.Wait()
	})
}

// run is one worker: it takes messages in Put order until the queue is
// closed and empty.
func (p *Pool[M]) run() {
	for m := range p.work {
		p.one(m)
	}
}

func (p *Pool[M]) one(m M) {
	defer func() { <-p.slots }()
	select {
	case <-p.stopped:
		p.unstarted(m)
		return
	default:
	}
	p.handle(m)
}

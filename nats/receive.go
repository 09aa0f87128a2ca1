package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Bounds of the pause between attempts to resume a broken pull.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRetryDelay = 5 * time.Second
	drainTimeout  = 5 * time.Second
	flushTimeout  = 5 * time.Second
)

// pullHeartbeat is the idle heartbeat asked of the server on every pull
// (the client's minimum). A pull that hears neither a message nor a
// heartbeat for twice this long is re-issued by the client. Under load,
// nats-server 2.9 now and then ends a pull without the client noticing:
// the client then waits for more messages that will never come until its
// heartbeat check fires. With the default of PullExpiry/2 that stalled a
// queue for 5 s (seen in the bench at 64 senders, logged as "no heartbeat
// received"); with 500 ms it resumes within about a second.
const pullHeartbeat = 500 * time.Millisecond

// Receive pulls the queue's durable consumer and its event consumers (those
// Provision made for the queue's subscriptions, found on the server when
// Receive starts) and calls h for each message, with at most
// opts.Concurrency calls at once and up to as many messages buffered ahead
// per consumer. A message is acknowledged when h returns nil and negatively
// acknowledged (redelivered, after Options.NakDelay) when it returns an
// error. Processes receiving the same queue compete for its messages.
//
// Pulls resume by themselves when the connection comes back after a server
// restart. When ctx ends, Receive stops pulling, hands the buffered messages
// it had not started back to the server, waits for the handlers in flight,
// settles their messages and returns nil. It returns an error only when the
// queue's consumer cannot be found or created, or the connection is closed.
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := driver.CheckReceive[errorFamily](queue, h); err != nil {
		return err
	}
	consumers, err := t.queueConsumers(ctx, queue)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("nats: receive %s: %w", queue, err)
	}
	conc := max(opts.Concurrency, 1)
	r := &receiver{
		t:        t,
		h:        h,
		hctx:     context.WithoutCancel(ctx),
		log:      t.opts.Logger.With(driver.LogQueue, queue),
		prefetch: max(t.opts.Prefetch, conc),
	}
	// The pulls of every consumer of the queue feed one FIFO worker pool;
	// a pull callback waits while every handler is busy, so the client
	// buffers at most Prefetch messages more per consumer.
	pool, err := driver.NewPool(driver.PoolOptions[jetstream.Msg]{Concurrency: conc, Handle: r.handle})
	if err != nil {
		return fmt.Errorf("nats: receive %s: %w", queue, err)
	}
	r.pool = pool
	pullCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(consumers))
	var pulls sync.WaitGroup
	for i, c := range consumers {
		pulls.Go(func() {
			if errs[i] = r.run(pullCtx, c); errs[i] != nil && i == 0 {
				stop() // without its own consumer the queue cannot be consumed
			} else if errs[i] != nil {
				r.log.Error("nats: event consumer stopped", driver.LogConsumer, c.CachedInfo().Name, driver.LogError, errs[i])
			}
		})
	}
	pulls.Wait()
	pool.Close()
	if t.nc.IsConnected() {
		if ferr := t.nc.FlushTimeout(flushTimeout); ferr != nil {
			r.log.Warn("nats: flushing acknowledgements", driver.LogError, ferr)
		}
	}
	if errs[0] != nil {
		return fmt.Errorf("nats: receive %s: %w", queue, errs[0])
	}
	return nil
}

// queueConsumers returns the queue's own consumer first, then its event
// consumers.
func (t *Transport) queueConsumers(ctx context.Context, queue string) ([]jetstream.Consumer, error) {
	if err := t.ensureQueue(ctx, queue); err != nil {
		return nil, err
	}
	s, err := t.js.Stream(ctx, t.opts.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", t.opts.Stream, err)
	}
	names := []string{consumerName(queue)}
	prefix := eventConsumerPrefix(queue)
	list := s.ConsumerNames(ctx)
	for name := range list.Name() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	out := make([]jetstream.Consumer, 0, len(names))
	for _, name := range names {
		c, err := s.Consumer(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

type receiver struct {
	t    *Transport
	h    bus.DeliveryHandler
	hctx context.Context
	pool *driver.Pool[jetstream.Msg] // one slot per handler call in flight
	// prefetch is how many messages each pull buffers ahead of the handlers.
	prefetch int
	log      *slog.Logger
}

// run consumes until ctx ends, re-creating the pull when it breaks.
func (r *receiver) run(ctx context.Context, cons jetstream.Consumer) error {
	delay := minRetryDelay
	for ctx.Err() == nil {
		err := r.consume(ctx, cons)
		if err == nil {
			return nil
		}
		if r.t.nc.IsClosed() {
			return natsio.ErrConnectionClosed
		}
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		r.log.Warn("nats: pull interrupted; resuming", driver.LogConsumer, cons.CachedInfo().Name, driver.LogError, err, "retry_in", delay)
		if !driver.Sleep(ctx, delay) {
			return nil
		}
		delay = min(delay*2, maxRetryDelay)
		if c, cerr := r.t.js.Consumer(ctx, r.t.opts.Stream, cons.CachedInfo().Name); cerr == nil {
			cons, delay = c, minRetryDelay
		} else if errors.Is(cerr, jetstream.ErrConsumerNotFound) {
			return cerr
		}
	}
	return nil
}

// consume hands the consumer's messages to the pool's workers, at most
// Concurrency at once. The pull callback blocks while every slot is taken, so
// the client buffers at most Prefetch messages more. consume returns nil
// when ctx ended and an error when the pull stopped by itself.
func (r *receiver) consume(ctx context.Context, cons jetstream.Consumer) error {
	var (
		mu        sync.Mutex
		lastErr   error
		unstarted []jetstream.Msg // buffered when the stop began
	)
	keep := func(msg jetstream.Msg) {
		mu.Lock()
		unstarted = append(unstarted, msg)
		mu.Unlock()
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		if r.pool.Acquire(ctx, 1) == 0 {
			keep(msg)
			return
		}
		r.pool.Put(msg)
	},
		jetstream.PullMaxMessages(r.prefetch),
		jetstream.PullExpiry(r.t.opts.PullExpiry),
		jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			r.log.Debug("nats: pull", driver.LogConsumer, cons.CachedInfo().Name, driver.LogError, err)
			mu.Lock()
			lastErr = err
			mu.Unlock()
		}))
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		cc.Drain() // buffered messages go through the callback into unstarted
		select {
		case <-cc.Closed():
		case <-time.After(drainTimeout):
			cc.Stop()
		}
		// Hand them back only now: a nak while the pull was still open
		// could send them straight back into this draining pull.
		mu.Lock()
		defer mu.Unlock()
		for _, msg := range unstarted {
			r.giveBack(msg)
		}
		return nil
	case <-cc.Closed():
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		return cmp.Or(lastErr, errors.New("pull stopped"))
	}
}

func (r *receiver) giveBack(msg jetstream.Msg) {
	if err := msg.Nak(); err != nil {
		r.log.Debug("nats: returning an unstarted message", driver.LogError, err)
	}
}

// handle runs the handler on one message and settles it.
func (r *receiver) handle(msg jetstream.Msg) {
	env := decodeMsg(msg.Headers(), msg.Data())
	stop := r.keepAlive(msg)
	err := r.h(withDelivery(r.hctx, msg), env)
	stop()
	if err != nil {
		if d := r.t.opts.NakDelay; d > 0 {
			err = msg.NakWithDelay(d)
		} else {
			err = msg.Nak()
		}
		if err != nil {
			r.log.Warn("nats: nak failed; the message returns after AckWait", driver.LogMessageID, env.ID, driver.LogError, err)
		}
		return
	}
	if r.t.opts.AckSync {
		ctx, cancel := context.WithTimeout(r.hctx, r.t.opts.AckWait)
		err = msg.DoubleAck(ctx)
		cancel()
	} else {
		err = msg.Ack()
	}
	if err != nil {
		r.log.Warn("nats: ack failed; the message may be redelivered", driver.LogMessageID, env.ID, driver.LogError, err)
	}
}

// keepAlive reports progress on msg every AckWait/3 until the returned
// function is called, so a slow handler keeps its message.
func (r *receiver) keepAlive(msg jetstream.Msg) (stop func()) {
	every := r.t.opts.AckWait / 3
	var (
		mu      sync.Mutex
		stopped bool
		timer   *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	timer = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := msg.InProgress(); err != nil {
			r.log.Debug("nats: progress report failed", driver.LogError, err)
		}
		timer.Reset(every)
	})
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
	}
}

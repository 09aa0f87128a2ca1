package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Receive consumes queue with a prefetch of 4× opts.Concurrency, at least
// minPrefetch (Options.Prefetch overrides it), and
// runs up to that many calls of h at once. A message is acknowledged after h
// returned nil and negatively acknowledged with requeue after an error, so
// the broker delivers it again.
//
// When ctx ends, Receive cancels the consumer, hands back (requeues)
// deliveries it had not started, waits for the calls in flight, settles
// them, and returns nil. When the connection or channel is lost, it waits
// for the transport to reconnect and consumes again; messages that were
// unacknowledged at the loss are redelivered by the broker, possibly to
// another consumer (at-least-once), and an acknowledgement is never sent
// twice. It returns an error only when it cannot consume at all: the queue
// does not exist or access to it is refused (a *PermanentError), the broker
// refuses the connection (a *PermanentError, at once rather than after
// waiting), or the transport was closed (ErrClosed).
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := checkName("queue", queue); err != nil {
		return fmt.Errorf("rabbitmq: receive: %w", err)
	}
	if h == nil {
		return fmt.Errorf("rabbitmq: receive from %q: nil handler", queue)
	}
	conc := max(opts.Concurrency, 1)
	c := &consumer{
		t:     t,
		queue: queue,
		conc:  conc,
		h:     h,
		hctx:  context.WithoutCancel(ctx),
	}
	// One pool of Concurrency workers serves every channel of this Receive,
	// so the bound holds across reconnections; deliveries start in the
	// order the broker sent them.
	pool, err := driver.NewPool(driver.PoolOptions[started]{Concurrency: conc, Handle: c.run})
	if err != nil {
		return fmt.Errorf("rabbitmq: receive from %q: %w", queue, err)
	}
	c.pool = pool
	defer pool.Close()
	defer c.running.Wait()
	delay := t.opts.ReconnectMin
	for {
		s, err := t.session(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("rabbitmq: receive from %q: %w", queue, err)
		}
		err = c.consume(ctx, s)
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrPermanent):
			return fmt.Errorf("rabbitmq: receive from %q: %w", queue, err)
		}
		t.report(fmt.Errorf("rabbitmq: receive from %q: %w", queue, err))
		t.log.Warn("rabbitmq: consumer interrupted, resuming", logKeyQueue, queue, logKeyErr, err)
		if s.conn.IsClosed() {
			delay = t.opts.ReconnectMin // the transport's backoff paces the reconnection
			continue
		}
		// The channel failed under a live connection: pace the retries.
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil
		}
		delay = min(delay*2, t.opts.ReconnectMax)
	}
}

type consumer struct {
	t       *Transport
	queue   string
	conc    int
	h       bus.DeliveryHandler
	hctx    context.Context
	pool    *driver.Pool[started] // bounds handler calls across reconnections
	running sync.WaitGroup        // channel closes waiting for their handlers
}

// started is a delivery given to the pool, with the handler calls of its
// channel, which must end before the channel closes.
type started struct {
	d        amqp.Delivery
	inflight *sync.WaitGroup
}

func (c *consumer) run(s started) {
	defer s.inflight.Done()
	c.handle(&s.d)
}

// consume runs one consumer on a fresh channel of s. It returns nil after
// ctx ended and everything in flight was settled, or the error that ended
// consuming.
// minPrefetch is the smallest default prefetch: with one or two handlers,
// four times the concurrency leaves too few messages on their way to hide
// the acknowledgements' round trips through a quorum queue's log.
const minPrefetch = 32

func (c *consumer) consume(ctx context.Context, s *session) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(cmp.Or(c.t.opts.Prefetch, max(4*c.conc, minPrefetch)), 0, false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("set prefetch: %w", err)
	}
	tag := fmt.Sprintf("postbus-%016x", rand.Uint64())
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return fmt.Errorf("consume: %w", channelRefused(err))
	}
	var inflight sync.WaitGroup // handler calls on this channel
	for {
		select {
		case <-ctx.Done():
			c.stop(ch, tag, deliveries)
			inflight.Wait() // their acks need the channel open
			_ = ch.Close()
			return nil
		case d, ok := <-deliveries:
			if !ok {
				// Lost (or cancelled by the broker, e.g. the queue was
				// deleted). If only the consumer was cancelled, the
				// handlers still running ack on this channel, so close
				// it after them; if the channel is gone, their messages
				// are redelivered.
				c.running.Add(1)
				go func() {
					defer c.running.Done()
					inflight.Wait()
					_ = ch.Close()
				}()
				return channelError(closes)
			}
			if c.pool.Acquire(ctx, 1) == 0 { // do not start work after the end
				_ = d.Nack(false, true)
				continue
			}
			inflight.Add(1)
			c.pool.Put(started{d: d, inflight: &inflight})
		}
	}
}

// stop cancels the consumer and requeues the deliveries that arrived but
// were not started; the library hands them over until the consumer's
// channel closes.
func (c *consumer) stop(ch *amqp.Channel, tag string, deliveries <-chan amqp.Delivery) {
	if err := ch.Cancel(tag, false); err != nil {
		return // the channel is gone; the broker requeues what it had sent
	}
	for d := range deliveries {
		_ = d.Nack(false, true)
	}
}

func (c *consumer) handle(d *amqp.Delivery) {
	env := fromDelivery(d)
	var err error
	if herr := c.h(c.hctx, env); herr == nil {
		err = d.Ack(false)
	} else {
		err = d.Nack(false, true)
	}
	if err != nil {
		err = fmt.Errorf("rabbitmq: settle message %q from %q (it will be redelivered): %w", env.ID, c.queue, err)
		c.t.report(err)
		c.t.log.Warn("rabbitmq: settle failed", logKeyQueue, c.queue, logKeyErr, err)
	}
}

func channelError(closes <-chan *amqp.Error) error {
	select {
	case e, ok := <-closes:
		if ok && e != nil {
			return fmt.Errorf("channel closed: %w", e)
		}
	default:
	}
	return errors.New("consumer cancelled or channel closed")
}

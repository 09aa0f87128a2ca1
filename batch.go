package bus

import (
	"context"
	"fmt"
	"sync"
)

// Batch is a list of messages that Bus.SendBatch sends or schedules in one
// call: each added with Send (a command) or Publish (an event) and its own
// options, exactly as Bus.Send and Bus.Publish take them. The zero value is
// an empty batch. A Batch is not safe for concurrent use; it can be sent
// more than once, and each send makes new message IDs unless WithMessageID
// fixes them.
type Batch struct {
	items []batchItem
}

type batchItem struct {
	kind Kind
	msg  any
	opts []Option
}

// Send adds a command to the batch, routed as Bus.Send routes it.
func (bt *Batch) Send(msg any, opts ...Option) {
	bt.items = append(bt.items, batchItem{kind: KindCommand, msg: msg, opts: opts})
}

// Publish adds an event to the batch, for every endpoint that handles its
// type, as Bus.Publish does.
func (bt *Batch) Publish(msg any, opts ...Option) {
	bt.items = append(bt.items, batchItem{kind: KindEvent, msg: msg, opts: opts})
}

// Len returns the number of messages in the batch.
func (bt *Batch) Len() int { return len(bt.items) }

// Reset empties the batch, keeping its capacity.
func (bt *Batch) Reset() {
	clear(bt.items)
	bt.items = bt.items[:0]
}

// BatchError reports the message of a batch that SendBatch refused; nothing
// of the batch was sent or stored. Err is what Send or Publish would have
// returned for that message alone (an *OptionError, ErrNoRoute,
// ErrInvalidMessage, an outgoing middleware's error...), and errors.Is and
// errors.As see through to it.
type BatchError struct {
	Index int // the message's position in the batch, from 0
	Err   error
}

// Error describes the failure.
func (e *BatchError) Error() string {
	return fmt.Sprintf("bus: batch message %d: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// SendBatch sends or schedules every message of batch in one call, all or
// none.
//
// Every message is checked first, and its envelope built, exactly as Send
// or Publish would (options, route, serializer, size, outgoing middleware
// and observer): the first refusal returns a *BatchError naming the message,
// and nothing is stored or sent. On a stopped bus it returns ErrClosed.
//
// Then, outside a handler, the whole batch is stored in the
// scheduled-message store with one StoreOutgoing call: one transaction on
// PostgreSQL and SQLite (PostgreSQL copies a large batch in with COPY), so
// either every row is stored or none is (MongoDB, without transactions,
// documents what it does instead). A message due later is stored
// until its due time, as with DeliverAfter or DeliverAt; a message without
// a due time is stored as a row due at once, which keeps the call atomic,
// and this bus's dispatcher, woken at once, hands it to the transport (a
// send-only bus leaves it to the dispatcher of another process on the same
// store). A persistence without a ScheduledStore cannot take a batch:
// *DelayedDeliveryNotSupportedError. With the transactional outbox on and a
// caller's transaction in ctx (such as postgres.WithTx), the rows are
// stored in that transaction instead.
//
// Called with a handler's ctx, the messages join the handler's other
// outgoing messages, with the same IDs one Send or Publish per message in
// the same order would get, and are released (or, with the outbox,
// committed) only when the handler succeeds.
//
// Storing is idempotent by message ID, as for single sends: a message
// whose ID is already stored (the same batch sent again with WithMessageID,
// a retried handler) keeps its existing row and is not scheduled twice.
// An empty or nil batch does nothing.
func (b *Bus) SendBatch(ctx context.Context, batch *Batch) error {
	if err := b.checkSendOpen(ctx); err != nil {
		return err
	}
	if batch == nil || len(batch.items) == 0 {
		return nil
	}
	s := scopeFrom(ctx)
	if s != nil && s.bus != b {
		s = nil
	}
	if s == nil {
		if err := b.checkCanSchedule(); err != nil {
			return err
		}
	}
	c := &collector{bus: b, pending: make([]pending, 0, len(batch.items))}
	cctx := context.WithValue(ctx, collectorKey{}, c)
	var ends []func(error)
	var err error
	for i, it := range batch.items {
		env, ictx, perr := b.prepare(cctx, it.kind, it.msg, it.opts)
		if perr == nil {
			if b.cfg.Observer != nil {
				var end func(error)
				ictx, end = b.observeSend(ictx, env, SendMessage)
				ends = append(ends, end)
			}
			perr = b.outgoing(ictx, env)
		}
		if perr != nil {
			err = &BatchError{Index: i, Err: perr}
			break
		}
	}
	ps := c.take() // from now on, a late message from middleware is refused
	if err == nil {
		err = b.releaseBatch(ctx, s, ps)
	}
	for _, end := range ends {
		end(err)
	}
	return err
}

// releaseBatch hands a checked batch on: to the handler's scope, to the
// caller's transaction, or to the store, with immediate messages as rows
// due at once.
func (b *Bus) releaseBatch(ctx context.Context, s *scope, ps []pending) error {
	switch {
	case len(ps) == 0: // outgoing middleware dropped every message
		return nil
	case s != nil:
		return s.add(ps...)
	}
	if stored, err := b.storeInHandlingTx(ctx, ps...); stored || err != nil {
		return err
	}
	if stored, err := b.storeInCallerTx(ctx, ps...); stored || err != nil {
		return err
	}
	markDueNow(ps, b.clock.Now())
	return b.schedule(ctx, ps)
}

// collector gathers the messages of one SendBatch call at the end of the
// outgoing pipeline (deliverOutgoing), so that they are released together.
type collector struct {
	bus      *Bus
	mu       sync.Mutex // middleware may call next from another goroutine
	pending  []pending
	released bool
}

type collectorKey struct{}

func collectorFrom(ctx context.Context) *collector {
	c, _ := ctx.Value(collectorKey{}).(*collector)
	return c
}

// add collects p, unless the batch was already released: a message that
// middleware passes on after SendBatch went ahead is refused, not lost.
func (c *collector) add(p pending) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return fmt.Errorf("bus: %s %s reached the end of the outgoing pipeline after its batch was released: %w",
			p.env.Kind, p.env.ID, ErrBatchReleased)
	}
	c.pending = append(c.pending, p)
	return nil
}

// take returns what was collected and ends the collection.
func (c *collector) take() []pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	return c.pending
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"
)

// Send sends a command to the endpoint its type is routed to (Route), or to
// the endpoint named with To. With DeliverAfter or DeliverAt it is stored and
// delivered when due. Called with a handler's ctx, the message inherits the
// correlation ID and sticky attributes of the message being handled, and is
// sent only if the handler succeeds.
func (b *Bus) Send(ctx context.Context, msg any, opts ...Option) error {
	return b.send(ctx, KindCommand, msg, opts)
}

// Publish publishes an event to every endpoint that handles its type. It
// accepts the same options as Send, except To.
func (b *Bus) Publish(ctx context.Context, msg any, opts ...Option) error {
	return b.send(ctx, KindEvent, msg, opts)
}

// Reply answers the sender of the message being handled; ctx must be the
// handler's ctx. The reply carries the incoming correlation ID.
func Reply(ctx context.Context, msg any, opts ...Option) error {
	s := scopeFrom(ctx)
	if s == nil {
		return ErrNotInHandler
	}
	return s.bus.send(ctx, KindReply, msg, opts)
}

func (b *Bus) send(ctx context.Context, kind Kind, msg any, opts []Option) error {
	if err := b.checkSendOpen(ctx); err != nil {
		return err
	}
	env, ctx, err := b.prepare(ctx, kind, msg, opts)
	if err != nil {
		return err
	}
	if b.cfg.Observer == nil {
		return b.outgoing(ctx, env)
	}
	ctx, end := b.observeSend(ctx, env, SendMessage)
	err = b.outgoing(ctx, env)
	end(err)
	return err
}

// checkSendOpen refuses a send on a stopped bus. A handler still running
// while Stop waits for it may send: its messages are released with its
// success, as always.
func (b *Bus) checkSendOpen(ctx context.Context) error {
	if s := scopeFrom(ctx); s == nil || s.bus != b {
		return b.checkOpen()
	}
	return nil
}

// prepare checks the options of one message and builds its envelope. The
// ctx it returns carries a DeliverAfter delay down the outgoing pipeline.
func (b *Bus) prepare(ctx context.Context, kind Kind, msg any, opts []Option) (*Envelope, context.Context, error) {
	o, err := parseOptions(opts)
	if err != nil {
		return nil, ctx, err
	}
	env, err := b.newEnvelope(ctx, kind, msg, &o)
	if err != nil {
		return nil, ctx, err
	}
	if env.DueAt.After(env.SentAt) { // a due time that passed sends at once
		if err := b.checkCanSchedule(); err != nil {
			return nil, ctx, err
		}
	}
	if o.hasAfter && o.after > 0 {
		ctx = context.WithValue(ctx, relativeDelayKey{}, o.after)
	}
	return env, ctx, nil
}

// relativeDelayKey carries a DeliverAfter delay down the outgoing pipeline,
// so a store with a clock of its own computes the due time itself.
type relativeDelayKey struct{}

func relativeDelay(ctx context.Context) time.Duration {
	d, _ := ctx.Value(relativeDelayKey{}).(time.Duration)
	return d
}

func (b *Bus) newEnvelope(ctx context.Context, kind Kind, msg any, o *sendOptions) (*Envelope, error) {
	if msg == nil {
		return nil, fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	now := b.clock.Now()
	due, err := o.dueAt(now)
	if err != nil {
		return nil, err
	}
	env := &Envelope{
		ID: o.messageID, Type: b.names.of(msg), Kind: kind, ContentType: b.cfg.Serializer.ContentType(),
		Headers: o.headers, Attributes: o.attributes, Source: b.cfg.Endpoint,
		SentAt: now.UTC(), DueAt: due, OrderingKey: o.orderingKey,
	}
	if o.replyTo != "" {
		env.SetHeader(HeaderReplyTo, o.replyTo)
	}
	if env.ID == "" {
		if s := scopeFrom(ctx); s != nil {
			env.ID = s.nextID(b.cfg.Endpoint) // stable across retries of the handler
		} else {
			env.ID = b.ids.New()
		}
	}
	in := IncomingMessage(ctx)
	if in != nil {
		env.CorrelationID = in.CorrelationID
		env.StickyAttributes = maps.Clone(in.StickyAttributes)
	}
	if o.correlationID != "" {
		env.CorrelationID = o.correlationID
	}
	if env.CorrelationID == "" {
		env.CorrelationID = env.ID
	}
	for k, v := range o.sticky {
		env.StickyAttributes = setKey(env.StickyAttributes, k, v)
	}
	switch kind {
	case KindCommand:
		env.Destination = o.destination
		if env.Destination == "" {
			var ok bool
			if env.Destination, ok = b.route(env.Type); !ok {
				return nil, fmt.Errorf("%w %s: use bus.Route or bus.To", ErrNoRoute, env.Type)
			}
		}
	case KindEvent:
		if o.destination != "" {
			return nil, &OptionError{Option: "To", Reason: "events are published to subscribers, not sent to an endpoint"}
		}
	case KindReply:
		if env.Destination = in.Header(HeaderReplyTo); env.Destination == "" {
			env.Destination = in.Source
		}
		if env.Destination == "" {
			return nil, ErrNoReplyAddress
		}
	}
	if env.Body, err = b.cfg.Serializer.Marshal(msg); err != nil {
		return nil, fmt.Errorf("%w: serialize %s: %w", ErrInvalidMessage, env.Type, err)
	}
	applyTimers(env, o)
	if len(env.Body) > b.cfg.MaxMessageSize {
		return nil, fmt.Errorf("%w: %s body is %d bytes, over MaxMessageSize %d", ErrInvalidMessage, env.Type, len(env.Body), b.cfg.MaxMessageSize)
	}
	return env, nil
}

func (b *Bus) checkCanSchedule() error {
	if b.store == nil {
		return &DelayedDeliveryNotSupportedError{Persistence: fmt.Sprintf("%T", b.cfg.Persistence)}
	}
	if !b.cfg.Persistence.Durable() {
		b.warnOnce.Do(func() {
			b.log.Warn("scheduled messages are kept by a non-durable persistence and are lost on restart; "+
				"set Config.Persistence to a durable store (postgres.New, mysql.New, sqlite.Open, mongodb.New, or redis.NewPersistence on a server with AOF or replicas) to keep them",
				slog.String("persistence", fmt.Sprintf("%T", b.cfg.Persistence)))
		})
	}
	return nil
}

// deliverOutgoing is the last step of the outgoing pipeline: in SendBatch
// it collects the message for the batch; from a handler it queues the
// message until the handler succeeds; otherwise it stores a message due
// later, or hands it to the transport.
func (b *Bus) deliverOutgoing(ctx context.Context, env *Envelope) error {
	p := pending{env: env, delay: relativeDelay(ctx)}
	if c := collectorFrom(ctx); c != nil && c.bus == b {
		return c.add(p)
	}
	if s := scopeFrom(ctx); s != nil && s.bus == b {
		return s.add(p)
	}
	if stored, err := b.storeInCallerTx(ctx, p); stored || err != nil {
		return err
	}
	if !env.DueAt.IsZero() && env.DueAt.After(b.clock.Now()) {
		if stored, err := b.storeInHandlingTx(ctx, p); stored || err != nil {
			return err
		}
		return b.schedule(ctx, []pending{p})
	}
	return b.transmit(ctx, env)
}

// pending is a message on its way to the store: the envelope, and its
// delay when the due time is relative (DeliverAfter, delayed retries).
type pending struct {
	env   *Envelope
	delay time.Duration
}

// transmit hands a message this endpoint sends now to the transport, and
// counts it in Metrics.Sent once the transport accepted it.
func (b *Bus) transmit(ctx context.Context, env *Envelope) error {
	accepted, err := b.handToTransport(ctx, env)
	if accepted {
		b.metrics.sent.Add(1)
	}
	return err
}

// handToTransport hands an envelope to the transport (see outboundOf),
// unless it expired on its way, and reports whether the transport accepted
// it. The dispatcher calls it for due rows, which Metrics counts as
// Dispatched when settled rather than as Sent.
func (b *Bus) handToTransport(ctx context.Context, env *Envelope) (bool, error) {
	if class, ok := expired(env, b.clock.Now(), true); ok {
		return false, b.discardExpired(ctx, env, class)
	}
	var err error
	if out := outboundOf(env); out.Publish {
		err = b.transport.Publish(ctx, env)
	} else {
		err = b.transport.Send(ctx, out.Queue, env)
	}
	return err == nil, b.transmitted(env, err)
}

// transmitted names the message in a failed hand-over to the transport.
func (b *Bus) transmitted(env *Envelope, err error) error {
	if err != nil {
		return fmt.Errorf("bus: %s %s %s: %w", env.Kind, env.Type, env.ID, err)
	}
	return nil
}

// schedule stores messages in the scheduled-message store and wakes this
// process's dispatcher when one is due sooner than it planned to look. The
// row ID is the message ID, except for delayed retries: their rows get
// their own ID, since the row of the delivery that failed may still exist.
// Each row carries the identity of this bus's transport.
func (b *Bus) schedule(ctx context.Context, msgs []pending) error {
	rows := b.rows(msgs, b.clock.Now())
	earliest := rows[0].DueAt
	for i := range rows {
		if rows[i].DueAt.Before(earliest) {
			earliest = rows[i].DueAt
		}
	}
	if err := b.store.StoreOutgoing(ctx, rows); err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrInvalidMessage) { // a refused message is not a failing store
			b.storeBreaker.Failure(err)
		}
		return fmt.Errorf("bus: schedule %d message(s): %w", len(rows), err)
	}
	b.storeBreaker.Success()
	b.metrics.scheduled.Add(uint64(len(rows)))
	if d := b.dispatcher.Load(); d != nil {
		d.Poke(earliest)
	}
	return nil
}

// rows turns messages into store rows carrying this bus's transport
// identity and dispatch retry policy (withDispatchPolicy). A message
// without a due time is due at now.
func (b *Bus) rows(msgs []pending, now time.Time) []OutgoingMessage {
	rows := make([]OutgoingMessage, len(msgs))
	for i, p := range msgs {
		env := p.env
		id := env.ID
		if n := env.Header(HeaderDelayedRetries); n != "" {
			id += "#retry-" + n
		}
		due := env.DueAt
		if due.IsZero() {
			due = now
		}
		rows[i] = OutgoingMessage{ID: id, Kind: env.Kind, Type: env.Type, Envelope: MarshalEnvelope(b.withDispatchPolicy(env)), DueAt: due,
			Delay: p.delay, Transport: b.identity}
	}
	orderKeyed(rows, msgs, now)
	return rows
}

// CancelScheduled removes a scheduled message that has not been dispatched
// yet, and reports whether it did. It returns false for a message already
// handed to the transport or never scheduled, and for one a dispatcher is
// delivering right now (its row is leased): that delivery goes ahead.
//
// With a ctx that carries a database transaction, the cancel runs in it
// and follows its end: inside a handler of a bus with the outbox on, the
// handling's transaction (a handler that fails keeps the message
// scheduled); outside handlers, a caller's transaction (postgres.WithTx,
// sqlite.WithTx). A persistence that cannot do so (it does not implement
// TxCanceler) makes the call inside an outbox handling fail with
// ErrCannotJoinTx; after the handling was settled, ErrHandlerDone.
func (b *Bus) CancelScheduled(ctx context.Context, id string) (bool, error) {
	if err := b.checkOpen(); err != nil {
		return false, err
	}
	if b.store == nil {
		return false, &DelayedDeliveryNotSupportedError{Persistence: fmt.Sprintf("%T", b.cfg.Persistence)}
	}
	ok, err := b.cancelOutgoing(ctx, id)
	if err != nil {
		return false, fmt.Errorf("bus: cancel scheduled %s: %w", id, err)
	}
	return ok, nil
}

package bus

import (
	"context"
	"fmt"
	"time"
)

// Observer sees the bus's work as it happens, so tracing and metrics
// adapters (such as the otelbus module) can follow every message without a
// dependency in the core. It is modelled on pgx's QueryTracer: each Start
// call returns the ctx the work runs with, so an adapter can put its span
// there, and the matching End call receives that ctx.
//
// Set it in Config.Observer; nil (the default) costs nothing beyond one nil
// check per step. Calls come from many goroutines at once, and must be fast
// and must not block: they run on the bus's hot path.
//
// The steps, and which Start/End pair covers them:
//
//	Send, Publish, Reply, delayed retry ─ StartSend/EndSend (once per message, before
//	                                      the outgoing middleware; may set headers)
//	dispatcher hands a due row over     ─ StartDispatch/EndDispatch
//	a delivery, until it is concluded   ─ StartReceive/EndReceive
//	one attempt of the handlers         ─ StartAttempt/EndAttempt
//	claims (empty ones too), settles, retries, the error queue, expiries,
//	circuit breakers                    ─ Event
//
// Headers an observer sets in StartSend travel with the message, through the
// scheduled-message store for delayed messages, to the receiving endpoint:
// that is how trace context crosses a delay or a restart. The "postbus."
// header prefix is the bus's own; an observer uses other names (the W3C
// "traceparent" and "tracestate", for instance).
type Observer interface {
	// StartSend is called once per message sent, published, replied or
	// scheduled (including a delayed retry), before the outgoing
	// middleware. The observer may set headers on info.Envelope.
	StartSend(ctx context.Context, info SendStart) context.Context
	// EndSend is called when the message was handed to the transport, stored
	// for later, or queued until the sending handler succeeds; or failed.
	EndSend(ctx context.Context, info SendEnd)
	// StartDispatch is called when the dispatcher hands one due row to the
	// transport.
	StartDispatch(ctx context.Context, info DispatchStart) context.Context
	// EndDispatch is called when the transport accepted the row or failed.
	EndDispatch(ctx context.Context, info DispatchEnd)
	// StartReceive is called when a delivery reaches the incoming pipeline.
	StartReceive(ctx context.Context, info ReceiveStart) context.Context
	// EndReceive is called once the delivery is concluded (handled, retried
	// later, moved to the error queue, expired) or given back to the
	// transport.
	EndReceive(ctx context.Context, info ReceiveEnd)
	// StartAttempt is called before each attempt of the handlers of a
	// delivery; the handlers' ctx derives from the ctx it returns.
	StartAttempt(ctx context.Context, info AttemptStart) context.Context
	// EndAttempt is called when the attempt returned.
	EndAttempt(ctx context.Context, info AttemptEnd)
	// Event reports a step that has no duration of its own to trace.
	Event(ctx context.Context, ev ObserverEvent)
}

// BusObserver is an Observer that also wants to know which buses run, for
// instance to read gauges from them (Bus.ScheduledBacklog). BusStarted is
// called when Start succeeds (it must not call Start or Stop), BusStopped at
// the start of Stop.
type BusObserver interface {
	Observer
	BusStarted(b *Bus)
	BusStopped(b *Bus)
}

// SendKind says which call produced a message.
type SendKind uint8

// The send kinds.
const (
	SendMessage      SendKind = iota + 1 // Send, Publish or Reply
	SendDelayedRetry                     // a copy of a failed message, scheduled for a delayed retry
)

// SendStart describes a message about to be sent or scheduled.
type SendStart struct {
	Endpoint string    // the sending endpoint
	Envelope *Envelope // the message; headers may be set
	Kind     SendKind
	// Scheduled is true when the message is due later and goes to the
	// scheduled-message store (Envelope.DueAt is its due time).
	Scheduled bool
	// InHandler is true when a handler sends it: it is released only when
	// the handler succeeds.
	InHandler bool
	Time      time.Time // the bus's clock
}

// SendEnd describes the end of a send.
type SendEnd struct {
	Envelope  *Envelope
	Kind      SendKind
	Scheduled bool // as in SendStart
	Err       error
	Time      time.Time
}

// DispatchStart describes a due row being handed to the transport.
type DispatchStart struct {
	Endpoint string    // the dispatching endpoint
	Envelope *Envelope // the decoded row
	// DueAt is the row's due time; the dispatch lateness is Time − DueAt.
	DueAt    time.Time
	Failures int       // failed hand-overs of this row so far
	Time     time.Time // the bus's clock
}

// DispatchEnd describes the end of a hand-over.
type DispatchEnd struct {
	Envelope *Envelope
	Err      error
	Time     time.Time
}

// ReceiveStart describes a delivery reaching the incoming pipeline.
type ReceiveStart struct {
	Endpoint string    // the receiving endpoint (its input queue)
	Envelope *Envelope // the message; read-only
	// Time is when handling starts, on the bus's clock. For a message with
	// a due time (Envelope.DueAt: delayed messages and delayed retries),
	// the delivery lateness is Time − DueAt.
	Time time.Time
}

// Outcome is how a delivery was concluded.
type Outcome string

// The outcomes of a delivery.
const (
	OutcomeHandled    Outcome = "handled"     // a handler attempt succeeded
	OutcomeRetryLater Outcome = "retry_later" // a delayed retry was scheduled
	OutcomeErrorQueue Outcome = "error_queue" // moved to the error queue
	OutcomeExpired    Outcome = "expired"     // discarded by a message timer
	OutcomeReturned   Outcome = "returned"    // not concluded: given back to the transport
)

// ReceiveEnd describes the conclusion of a delivery.
type ReceiveEnd struct {
	Envelope *Envelope
	Outcome  Outcome
	Attempts int   // handler attempts made in this delivery
	Err      error // the error returned to the transport (OutcomeReturned)
	Time     time.Time
}

// AttemptStart describes one attempt of the handlers.
type AttemptStart struct {
	Endpoint string // the receiving endpoint
	Envelope *Envelope
	Attempt  int // immediate attempt within this delivery, from 1
	// DelayedRetries is how many delayed retries came before this delivery.
	DelayedRetries int
	Time           time.Time
}

// AttemptEnd describes the end of an attempt.
type AttemptEnd struct {
	Endpoint string
	Envelope *Envelope
	Attempt  int
	Err      error     // nil: the handlers succeeded
	Start    time.Time // AttemptStart.Time
	Time     time.Time
}

// EventKind names an ObserverEvent.
type EventKind uint8

// The event kinds.
const (
	// EventClaim: the dispatcher claimed Count due rows (Start: the claim's
	// start). A claim that finds nothing is EventClaimEmpty instead.
	EventClaim EventKind = iota + 1
	// EventSettle: the dispatcher settled a batch: Count rows deleted,
	// Failed recorded as failed, Released released (Start: settle start).
	EventSettle
	// EventRetry: a failed attempt is retried. Reason "immediate": at once,
	// in this delivery; "delayed": a delayed retry was scheduled after
	// Delay (Envelope is its copy).
	EventRetry
	// EventErrorQueue: the message was moved to the error queue; Reason is
	// the failure kind (handler, poison, dispatch).
	EventErrorQueue
	// EventExpired: a message timer discarded the message; Reason is the
	// timer (time-to-be-received, time-to-reach-queue).
	EventExpired
	// EventBreaker: the circuit breaker named Reason (store, fetch,
	// dispatch) opened (Open true) or closed.
	EventBreaker
	// EventClaimEmpty: a claim of the dispatcher returned without an error
	// and with no row (Start: the claim's start). An idle dispatcher reports
	// one each time it looks at the store, which is at least once per
	// DispatcherConfig.PollInterval: how often it polls, or, for a test, the
	// sign that a look is over.
	EventClaimEmpty
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventClaim:
		return "claim"
	case EventSettle:
		return "settle"
	case EventRetry:
		return "retry"
	case EventErrorQueue:
		return "error_queue"
	case EventExpired:
		return "expired"
	case EventBreaker:
		return "breaker"
	case EventClaimEmpty:
		return "claim_empty"
	}
	return "unknown"
}

// ObserverEvent is one step reported through Observer.Event. Fields that do
// not apply to its Kind are zero.
type ObserverEvent struct {
	Kind     EventKind
	Endpoint string    // the endpoint reporting it
	Envelope *Envelope // the message concerned; nil for batch and breaker events
	Reason   string
	Attempt  int
	Delay    time.Duration
	Err      error
	Count    int
	Failed   int
	Released int
	Open     bool
	Start    time.Time
	Time     time.Time // the bus's clock
}

// emit reports an event, and records the conclusion it stands for on the
// delivery being observed in ctx.
func (b *Bus) emit(ctx context.Context, ev ObserverEvent) {
	o := b.cfg.Observer
	if o == nil {
		return
	}
	ev.Endpoint = b.cfg.Endpoint
	if ev.Time.IsZero() {
		ev.Time = b.clock.Now()
	}
	if r, _ := ctx.Value(receiveStateKey{}).(*receiveState); r != nil {
		switch {
		case ev.Kind == EventRetry && ev.Reason == "delayed":
			r.outcome = OutcomeRetryLater
		case ev.Kind == EventErrorQueue:
			r.outcome = OutcomeErrorQueue
		case ev.Kind == EventExpired:
			r.outcome = OutcomeExpired
		}
	}
	o.Event(ctx, ev)
}

// receiveState follows one observed delivery: its outcome and attempts.
type receiveState struct {
	outcome  Outcome
	attempts int
}

type receiveStateKey struct{}

// observeProcess runs process for one delivery between StartReceive and
// EndReceive.
func (b *Bus) observeProcess(ctx context.Context, env *Envelope) error {
	o := b.cfg.Observer
	ctx = o.StartReceive(ctx, ReceiveStart{Endpoint: b.cfg.Endpoint, Envelope: env, Time: b.clock.Now()})
	st := &receiveState{}
	err := b.processMessage(context.WithValue(ctx, receiveStateKey{}, st), env)
	out := st.outcome
	switch {
	case err != nil:
		out = OutcomeReturned
	case out == "":
		out = OutcomeHandled
	}
	o.EndReceive(ctx, ReceiveEnd{Envelope: env, Outcome: out, Attempts: st.attempts, Err: err, Time: b.clock.Now()})
	return err
}

// observeAttempt runs one attempt between StartAttempt and EndAttempt.
func (b *Bus) observeAttempt(ctx context.Context, env *Envelope, attempt int) error {
	o := b.cfg.Observer
	if r, _ := ctx.Value(receiveStateKey{}).(*receiveState); r != nil {
		r.attempts = max(r.attempts, attempt)
	}
	start := b.clock.Now()
	actx := o.StartAttempt(ctx, AttemptStart{Endpoint: b.cfg.Endpoint, Envelope: env, Attempt: attempt, DelayedRetries: delayedRetries(env), Time: start})
	err := b.runAttempt(actx, env, attempt)
	o.EndAttempt(actx, AttemptEnd{Endpoint: b.cfg.Endpoint, Envelope: env, Attempt: attempt, Err: err, Start: start, Time: b.clock.Now()})
	return err
}

// observeSend calls StartSend and returns the ctx to send with and the
// function that ends the send. Without an observer it returns ctx and nil.
func (b *Bus) observeSend(ctx context.Context, env *Envelope, kind SendKind) (context.Context, func(error)) {
	o := b.cfg.Observer
	if o == nil {
		return ctx, nil
	}
	s := scopeFrom(ctx)
	now := b.clock.Now()
	scheduled := !env.DueAt.IsZero() && env.DueAt.After(now)
	ctx = o.StartSend(ctx, SendStart{Endpoint: b.cfg.Endpoint, Envelope: env, Kind: kind,
		Scheduled: scheduled, InHandler: s != nil && s.bus == b, Time: now})
	return ctx, func(err error) {
		o.EndSend(ctx, SendEnd{Envelope: env, Kind: kind, Scheduled: scheduled, Err: err, Time: b.clock.Now()})
	}
}

// Backlog summarises a bus's scheduled-message store, for gauges.
type Backlog struct {
	// Supported is false when the store cannot say (it does not implement
	// ScheduledBrowser); the other fields are then zero.
	Supported bool
	Count     int64 // rows stored, leased or not
	Estimated bool  // Count is the database's estimate
	Overdue   int64 // rows due and not leased (at most OverdueCap)
	// OldestOverdue is how long the earliest overdue row has been due; 0
	// when none is.
	OldestOverdue time.Duration
}

// ScheduledBacklog reads the backlog of this bus's scheduled-message store.
// It needs a store that implements ScheduledBrowser, which answers from
// indexes without scanning the table; for another store it returns a
// Backlog that is not Supported. Due times compare on the store's clock
// where it has one. With the ctx of an outbox handling, or one carrying
// the caller's transaction (TxCarrier), it returns ErrCannotJoinTx: its
// queries would need a second connection.
func (b *Bus) ScheduledBacklog(ctx context.Context) (Backlog, error) {
	if err := b.checkNoTx(ctx, "ScheduledBacklog"); err != nil {
		return Backlog{}, err
	}
	sb, ok := b.store.(ScheduledBrowser)
	if !ok {
		return Backlog{}, nil
	}
	now := b.clock.Now()
	if cs, ok := b.store.(ClockedStore); ok {
		t, err := cs.StoreNow(ctx)
		if err != nil {
			return Backlog{}, fmt.Errorf("bus: backlog: %w", err)
		}
		now = t
	}
	st, err := sb.StatsScheduled(ctx, now)
	if err != nil {
		return Backlog{}, fmt.Errorf("bus: backlog: %w", err)
	}
	bl := Backlog{Supported: true, Count: st.Count, Estimated: st.Estimated, Overdue: st.Overdue}
	if !st.OldestOverdue.IsZero() {
		bl.OldestOverdue = max(now.Sub(st.OldestOverdue), 0)
	}
	return bl, nil
}

// Clock returns the clock the bus tells time with (Config.Clock).
func (b *Bus) Clock() Clock { return b.clock }

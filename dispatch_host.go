package bus

import (
	"context"
	"sync"
	"time"

	"github.com/postbus/bus/internal/dispatch"
)

// The dispatcher of scheduled messages lives in internal/dispatch; this
// file builds it from the bus's Config and answers what it asks of the
// bus (dispatch.Host): the hand-over of one message as the bus sends its
// own (expiry, observer spans), the error queue, observer events and
// counters. Beside it the bus runs the runtime recurring schedules and,
// with the outbox on, the inbox purge.

// newDispatcher returns the dispatcher of this bus's store.
func (b *Bus) newDispatcher() *dispatch.Dispatcher {
	d := b.cfg.Dispatcher
	return dispatch.New(dispatch.Config{
		Endpoint: b.cfg.Endpoint, Identity: b.identity, Store: b.store, Transport: b.transport,
		Clock: b.clock, Logger: b.log,
		PollInterval: d.PollInterval, BatchSize: d.BatchSize, Lease: d.Lease, Concurrency: d.Concurrency,
		SendTimeout: d.SendTimeout, NumberOfRetries: d.NumberOfRetries, RetryBackoff: d.RetryBackoff,
		LookAhead: d.LookAhead, MaximumRecoveryFailuresPerSecond: d.MaximumRecoveryFailuresPerSecond,
		Fetch:        b.newBreaker("fetch", b.cfg.CircuitBreakers.Fetch),
		Dispatch:     b.newBreaker("dispatch", b.cfg.CircuitBreakers.Dispatch),
		StoreBreaker: b.storeBreaker,
	}, dispatchHost{b})
}

// runDispatcher runs d until ctx ends, with the runtime recurring
// schedules and the inbox purge beside it, and returns once all stopped.
func (b *Bus) runDispatcher(ctx context.Context, d *dispatch.Dispatcher) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if st, ok := b.cfg.Persistence.(RecurringRuntimeStore); ok {
		wg.Go(func() { b.runRuntimeRecurring(ctx, st) })
	}
	if o := b.outbox; o != nil {
		p := dispatch.NewInboxPurge(o, b.cfg.Outbox.Retention, b.clock, b.log)
		wg.Go(func() { p.Run(ctx) })
	}
	d.Run(ctx)
}

// newBreaker returns a breaker that reports its trips to
// Config.OnCriticalError and, with an Observer, its state changes as
// EventBreaker.
func (b *Bus) newBreaker(name string, trigger time.Duration) *dispatch.Breaker {
	onTrip := func(since time.Time, err error) {
		b.cfg.OnCriticalError(&CriticalError{Breaker: name, Since: since, Err: err})
	}
	var onChange func(bool)
	if b.cfg.Observer != nil {
		onChange = func(open bool) {
			b.emit(context.Background(), ObserverEvent{Kind: EventBreaker, Reason: name, Open: open})
		}
	}
	return dispatch.NewBreaker(name, trigger, b.clock, onTrip, onChange)
}

// dispatchHost is the bus as its dispatcher sees it.
type dispatchHost struct{ b *Bus }

var _ dispatch.Host = dispatchHost{}

// HandOver hands a due row to the transport, between the Observer's
// StartDispatch and EndDispatch when there is one.
func (h dispatchHost) HandOver(ctx context.Context, row *OutgoingMessage, env *Envelope) error {
	o := h.b.cfg.Observer
	if o == nil {
		_, err := h.b.handToTransport(ctx, env)
		return err
	}
	ctx = o.StartDispatch(ctx, h.dispatchStart(row, env))
	_, err := h.b.handToTransport(ctx, env)
	o.EndDispatch(ctx, DispatchEnd{Envelope: env, Err: err, Time: h.b.clock.Now()})
	return err
}

// StartDispatch calls the Observer's StartDispatch, if any.
func (h dispatchHost) StartDispatch(ctx context.Context, row *OutgoingMessage, env *Envelope) context.Context {
	if o := h.b.cfg.Observer; o != nil {
		return o.StartDispatch(ctx, h.dispatchStart(row, env))
	}
	return ctx
}

// EndDispatch calls the Observer's EndDispatch, if any.
func (h dispatchHost) EndDispatch(ctx context.Context, env *Envelope, err error) {
	if o := h.b.cfg.Observer; o != nil {
		o.EndDispatch(ctx, DispatchEnd{Envelope: env, Err: err, Time: h.b.clock.Now()})
	}
}

// dispatchStart describes the hand-over of row, decoded as env, starting now.
func (h dispatchHost) dispatchStart(row *OutgoingMessage, env *Envelope) DispatchStart {
	return DispatchStart{Endpoint: h.b.cfg.Endpoint, Envelope: env, DueAt: row.DueAt, Failures: row.Failures, Time: h.b.clock.Now()}
}

// Outbound is outboundOf, unless env expired on its way by now.
func (h dispatchHost) Outbound(env *Envelope, now time.Time) (Outbound, bool) {
	if _, ok := expired(env, now, true); ok {
		return Outbound{}, false
	}
	return outboundOf(env), true
}

// Transmitted is the bus's transmitted.
func (h dispatchHost) Transmitted(env *Envelope, err error) error { return h.b.transmitted(env, err) }

// MoveToError is the bus's moveToError.
func (h dispatchHost) MoveToError(ctx context.Context, env *Envelope, kind string, failures int, cause error) error {
	return h.b.moveToError(ctx, env, kind, failures, cause)
}

// Emit reports a dispatcher event as the Observer's ObserverEvent.
func (h dispatchHost) Emit(ctx context.Context, ev dispatch.Event) {
	if h.b.cfg.Observer == nil {
		return
	}
	kind := EventSettle
	switch ev.Kind {
	case dispatch.EventClaim:
		kind = EventClaim
	case dispatch.EventClaimEmpty:
		kind = EventClaimEmpty
	}
	h.b.emit(ctx, ObserverEvent{Kind: kind, Count: ev.Count, Failed: ev.Failed, Released: ev.Released, Start: ev.Start})
}

// Dispatched counts rows in Metrics.Dispatched.
func (h dispatchHost) Dispatched(n int) { h.b.metrics.dispatched.Add(uint64(n)) }

// DispatchFailed counts a failed hand-over in Metrics.DispatchFails.
func (h dispatchHost) DispatchFailed() { h.b.metrics.dispatchFails.Add(1) }

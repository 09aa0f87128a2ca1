package otelbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/postbus/bus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "github.com/postbus/bus/otel"

// Attribute keys: the OpenTelemetry messaging conventions, then Postbus's own.
const (
	keySystem         = attribute.Key("messaging.system")
	keyOperationType  = attribute.Key("messaging.operation.type")
	keyOperationName  = attribute.Key("messaging.operation.name")
	keyDestination    = attribute.Key("messaging.destination.name")
	keyMessageID      = attribute.Key("messaging.message.id")
	keyConversationID = attribute.Key("messaging.message.conversation_id")
	keyBodySize       = attribute.Key("messaging.message.body.size")
	keyConsumerGroup  = attribute.Key("messaging.consumer.group.name")
	keyBatchCount     = attribute.Key("messaging.batch.message_count")
	keyErrorType      = attribute.Key("error.type")

	keyEndpoint       = attribute.Key("postbus.endpoint")
	keyMessageType    = attribute.Key("postbus.message.type")
	keyDueAt          = attribute.Key("postbus.due_at")
	keyLateness       = attribute.Key("postbus.lateness")
	keyAttempt        = attribute.Key("postbus.attempt")
	keyAttempts       = attribute.Key("postbus.attempts")
	keyOutcome        = attribute.Key("postbus.outcome")
	keyDelayedRetries = attribute.Key("postbus.delayed_retries")
	keyFailures       = attribute.Key("postbus.dispatch.failures")
	keyFailureKind    = attribute.Key("postbus.failure.kind")
	keyRetryKind      = attribute.Key("postbus.retry.kind")
	keyRetryDelay     = attribute.Key("postbus.retry.delay")
	keyTimer          = attribute.Key("postbus.timer")
	keyBreaker        = attribute.Key("postbus.breaker")
	keyFailed         = attribute.Key("postbus.settle.failed")
	keyReleased       = attribute.Key("postbus.settle.released")
)

// Observer is a bus.Observer that traces and measures a bus with
// OpenTelemetry. One Observer may serve several buses. Create it with New.
type Observer struct {
	opts   Options
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system attribute.KeyValue
	m      *instruments

	starts sync.Map // setKey -> trace.SpanStartEventOption (startAttrs)

	mu    sync.Mutex
	buses map[*bus.Bus]struct{}
	// breakers holds each open breaker by endpoint and name.
	breakers map[breakerKey]bool
}

type breakerKey struct{ endpoint, name string }

var _ bus.BusObserver = (*Observer)(nil)

// New returns an Observer for bus.Config.Observer.
func New(opts Options) (*Observer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	o := &Observer{
		opts:     opts,
		tracer:   opts.TracerProvider.Tracer(instrumentationName),
		prop:     opts.Propagator,
		system:   keySystem.String(opts.System),
		buses:    map[*bus.Bus]struct{}{},
		breakers: map[breakerKey]bool{},
	}
	m, err := newInstruments(o, opts.MeterProvider.Meter(instrumentationName))
	if err != nil {
		return nil, fmt.Errorf("otelbus: instruments: %w", err)
	}
	o.m = m
	return o, nil
}

// destination is where a message goes: its queue, or for a published
// event its type (the topic).
func destination(env *bus.Envelope) string {
	if env.Destination != "" {
		return env.Destination
	}
	return env.Type
}

// messageAttrs are the span attributes every span about one message has.
func (o *Observer) messageAttrs(env *bus.Envelope) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8) // room for the callers' own
	return append(attrs, keyMessageID.String(env.ID), keyConversationID.String(env.CorrelationID),
		keyBodySize.Int(len(env.Body)), keyMessageType.String(env.Type))
}

// startAttrs are the attributes a span starts with, for samplers: the rest
// is set only on spans that record. The options are cached: a bus has few
// destinations.
func (o *Observer) startAttrs(opType, opName, dest string) trace.SpanStartEventOption {
	k := setKey{family: opType, dest: dest, extra: opName}
	if v, ok := o.starts.Load(k); ok {
		return v.(trace.SpanStartEventOption)
	}
	v, _ := o.starts.LoadOrStore(k, trace.WithAttributes(o.system, keyOperationType.String(opType),
		keyOperationName.String(opName), keyDestination.String(dest)))
	return v.(trace.SpanStartEventOption)
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// StartSend starts a producer span for a message, "send <destination>", or
// "schedule <destination>" for one due later, as a child of ctx's span, and
// writes its context into the message's headers.
func (o *Observer) StartSend(ctx context.Context, info bus.SendStart) context.Context {
	env := info.Envelope
	name := "send"
	if info.Scheduled {
		name = "schedule"
	}
	dest := destination(env)
	ctx, span := o.tracer.Start(ctx, name+" "+dest, trace.WithSpanKind(trace.SpanKindProducer),
		o.startAttrs("send", name, dest), startAt(trace.SpanKindProducer, info.Time))
	if span.IsRecording() {
		attrs := o.messageAttrs(env)
		if info.Scheduled {
			attrs = append(attrs, keyDueAt.String(env.DueAt.UTC().Format(timeFormat)))
		}
		if info.Kind == bus.SendDelayedRetry {
			attrs = append(attrs, keyDelayedRetries.String(env.Header(bus.HeaderDelayedRetries)))
		}
		span.SetAttributes(attrs...)
	}
	o.prop.Inject(ctx, headers{env})
	return ctx
}

// EndSend ends the send span and counts the message.
func (o *Observer) EndSend(ctx context.Context, info bus.SendEnd) {
	endSpan(trace.SpanFromContext(ctx), info.Err, info.Time)
	op := "send"
	if info.Scheduled {
		op = "schedule"
	}
	o.m.sent(ctx, info.Envelope, op, info.Err)
}

// StartDispatch starts "dispatch <destination>", a producer span for the
// dispatcher's hand-over of a due message, linked to the span that
// scheduled it; it records the dispatch lateness.
func (o *Observer) StartDispatch(ctx context.Context, info bus.DispatchStart) context.Context {
	env := info.Envelope
	dest := destination(env)
	late := info.Time.Sub(info.DueAt)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer),
		o.startAttrs("send", "dispatch", dest), startAt(trace.SpanKindProducer, info.Time)}
	if o.opts.DelayedAsChild {
		ctx = o.prop.Extract(ctx, headers{env})
	} else {
		opts = append(opts, trace.WithNewRoot())
		if l, ok := o.link(ctx, env); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	}
	ctx, span := o.tracer.Start(ctx, "dispatch "+dest, opts...)
	if span.IsRecording() {
		attrs := append(o.messageAttrs(env), keyEndpoint.String(info.Endpoint), keyFailures.Int(info.Failures))
		if !info.DueAt.IsZero() {
			attrs = append(attrs, keyDueAt.String(info.DueAt.UTC().Format(timeFormat)), keyLateness.Float64(late.Seconds()))
		}
		span.SetAttributes(attrs...)
	}
	if !info.DueAt.IsZero() {
		o.m.dispatchLateness.Record(ctx, max(late.Seconds(), 0), o.m.labels("dispatch", keyDestination, dest, env.Type, "", ""))
	}
	return ctx
}

// EndDispatch ends the dispatch span and counts the message as sent.
func (o *Observer) EndDispatch(ctx context.Context, info bus.DispatchEnd) {
	endSpan(trace.SpanFromContext(ctx), info.Err, info.Time)
	o.m.sent(ctx, info.Envelope, "dispatch", info.Err)
}

// link returns a link to the span whose context the message's headers carry.
func (o *Observer) link(ctx context.Context, env *bus.Envelope) (trace.Link, bool) {
	sc := trace.SpanContextFromContext(o.prop.Extract(context.WithoutCancel(ctx), headers{env}))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}

// delayed reports whether a delivery was scheduled: a delayed message or a
// delayed retry, due after it was sent (a send whose due time had passed
// went out at once, and keeps that time in DueAt). Its spans link to the
// span that scheduled it instead of being its children.
func delayed(env *bus.Envelope) bool { return env.DueAt.After(env.SentAt) }

// deliverableAt is when env could first be delivered: its due time, or
// when it was sent if that was later. Delivery lateness counts from it, as
// the bus's Metrics do.
func deliverableAt(env *bus.Envelope) time.Time {
	if env.DueAt.After(env.SentAt) {
		return env.DueAt
	}
	return env.SentAt
}

// StartReceive starts "receive <queue>", the consumer span of a delivery
// until it is concluded. An immediate message's span is a child of the
// sender's span; a delayed message's (or a delayed retry's) starts a trace
// of its own and links to the span that scheduled it. It counts the
// message as consumed and records the delivery lateness of a message with
// a due time.
func (o *Observer) StartReceive(ctx context.Context, info bus.ReceiveStart) context.Context {
	env := info.Envelope
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), startAt(trace.SpanKindConsumer, info.Time),
		o.startAttrs("receive", "receive", info.Endpoint)}
	late := info.Time.Sub(deliverableAt(env))
	if !env.DueAt.IsZero() {
		o.m.deliveryLateness.Record(ctx, max(late.Seconds(), 0), o.m.labels("delivery", keyDestination, info.Endpoint, env.Type, "", ""))
	}
	if delayed(env) && !o.opts.DelayedAsChild {
		opts = append(opts, trace.WithNewRoot())
		if l, ok := o.link(ctx, env); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	} else {
		ctx = o.prop.Extract(ctx, headers{env})
	}
	ctx, span := o.tracer.Start(ctx, "receive "+info.Endpoint, opts...)
	if span.IsRecording() {
		attrs := append(o.messageAttrs(env), keyConsumerGroup.String(info.Endpoint))
		if !env.DueAt.IsZero() {
			attrs = append(attrs, keyDueAt.String(env.DueAt.UTC().Format(timeFormat)), keyLateness.Float64(late.Seconds()))
			if n := env.Header(bus.HeaderDelayedRetries); n != "" {
				attrs = append(attrs, keyDelayedRetries.String(n))
			}
		}
		span.SetAttributes(attrs...)
	}
	o.m.consumed.Add(ctx, 1, o.m.labels("consumed", keyDestination, info.Endpoint, env.Type, keyConsumerGroup, info.Endpoint))
	return ctx
}

// EndReceive ends the delivery span with its outcome and attempts.
func (o *Observer) EndReceive(ctx context.Context, info bus.ReceiveEnd) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(keyOutcome.String(string(info.Outcome)), keyAttempts.Int(info.Attempts))
	endSpan(span, info.Err, info.Time)
}

// StartAttempt starts "process <queue>", one attempt of the handlers, as a
// child of the delivery span (and, for a delayed message, also linked to
// the span that scheduled it).
func (o *Observer) StartAttempt(ctx context.Context, info bus.AttemptStart) context.Context {
	env := info.Envelope
	endpoint := info.Endpoint
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), startAt(trace.SpanKindConsumer, info.Time),
		o.startAttrs("process", "process", endpoint)}
	if delayed(env) && !o.opts.DelayedAsChild {
		if l, ok := o.link(ctx, env); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	}
	ctx, span := o.tracer.Start(ctx, "process "+endpoint, opts...)
	if span.IsRecording() {
		// The delivery span, its parent, has the message's attributes.
		span.SetAttributes(keyConsumerGroup.String(endpoint), keyMessageType.String(env.Type),
			keyAttempt.Int(info.Attempt), keyDelayedRetries.Int(info.DelayedRetries))
	}
	return ctx
}

// EndAttempt ends the attempt span with its outcome and records the
// processing duration.
func (o *Observer) EndAttempt(ctx context.Context, info bus.AttemptEnd) {
	span := trace.SpanFromContext(ctx)
	outcome := "success"
	if info.Err != nil {
		outcome = "failure"
	}
	span.SetAttributes(keyOutcome.String(outcome))
	endSpan(span, info.Err, info.Time)
	et := errorType(info.Err)
	o.m.processDuration.Record(ctx, info.Time.Sub(info.Start).Seconds(),
		o.m.attrs(setKey{"process", info.Endpoint, info.Envelope.Type, et, ""}, func() []attribute.KeyValue {
			attrs := []attribute.KeyValue{o.system, keyOperationName.String("process"), keyDestination.String(info.Endpoint),
				keyConsumerGroup.String(info.Endpoint), keyMessageType.String(info.Envelope.Type)}
			if et != "" {
				attrs = append(attrs, keyErrorType.String(et))
			}
			return attrs
		}))
}

// Event records retries, error-queue moves and expiries as span events and
// counters; claims and settles of the dispatcher as spans; breaker changes
// in the postbus.breaker.open gauge.
func (o *Observer) Event(ctx context.Context, ev bus.ObserverEvent) {
	span := trace.SpanFromContext(ctx)
	switch ev.Kind {
	case bus.EventRetry:
		span.AddEvent("postbus.retry", trace.WithTimestamp(ev.Time), trace.WithAttributes(
			keyRetryKind.String(ev.Reason), keyAttempt.Int(ev.Attempt), keyRetryDelay.Float64(ev.Delay.Seconds()),
			keyErrorType.String(errorType(ev.Err))))
		o.m.retries.Add(ctx, 1, o.m.labels("retries", keyDestination, ev.Endpoint, typeOf(ev.Envelope), keyRetryKind, ev.Reason))
	case bus.EventErrorQueue:
		span.AddEvent("postbus.error_queue", trace.WithTimestamp(ev.Time), trace.WithAttributes(
			keyFailureKind.String(ev.Reason), keyAttempts.Int(ev.Attempt), keyErrorType.String(errorType(ev.Err))))
		o.m.errorQueue.Add(ctx, 1, o.m.labels("error_queue", keyEndpoint, ev.Endpoint, typeOf(ev.Envelope), keyFailureKind, ev.Reason))
	case bus.EventExpired:
		span.AddEvent("postbus.expired", trace.WithTimestamp(ev.Time), trace.WithAttributes(keyTimer.String(ev.Reason)))
		o.m.expired.Add(ctx, 1, o.m.labels("expired", keyEndpoint, ev.Endpoint, typeOf(ev.Envelope), keyTimer, ev.Reason))
	case bus.EventClaim:
		_, s := o.tracer.Start(ctx, "claim scheduled", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
			trace.WithTimestamp(ev.Start), trace.WithAttributes(o.system, keyOperationType.String("receive"),
				keyOperationName.String("claim"), keyEndpoint.String(ev.Endpoint), keyBatchCount.Int(ev.Count)))
		s.End(trace.WithTimestamp(ev.Time))
	case bus.EventSettle:
		_, s := o.tracer.Start(ctx, "settle scheduled", trace.WithSpanKind(trace.SpanKindClient), trace.WithNewRoot(),
			trace.WithTimestamp(ev.Start), trace.WithAttributes(o.system, keyOperationType.String("settle"),
				keyOperationName.String("settle"), keyEndpoint.String(ev.Endpoint), keyBatchCount.Int(ev.Count),
				keyFailed.Int(ev.Failed), keyReleased.Int(ev.Released)))
		s.End(trace.WithTimestamp(ev.Time))
	case bus.EventBreaker:
		o.mu.Lock()
		o.breakers[breakerKey{ev.Endpoint, ev.Reason}] = ev.Open
		o.mu.Unlock()
	}
}

// BusStarted registers the bus for the backlog gauges.
func (o *Observer) BusStarted(b *bus.Bus) {
	o.mu.Lock()
	o.buses[b] = struct{}{}
	o.mu.Unlock()
}

// BusStopped unregisters the bus.
func (o *Observer) BusStopped(b *bus.Bus) {
	o.mu.Lock()
	delete(o.buses, b)
	for k := range o.breakers {
		if k.endpoint == b.Endpoint() {
			delete(o.breakers, k)
		}
	}
	o.mu.Unlock()
}

func typeOf(env *bus.Envelope) string {
	if env == nil {
		return ""
	}
	return env.Type
}

// clockSlack is how far the bus's clock may be from the wall clock for a
// span to take the SDK's own timestamp: passing one costs an allocation,
// and with the system clock the two agree.
const clockSlack = time.Millisecond

// startAt returns the option that starts a span of kind at t, the bus's
// clock; near the wall clock it leaves the time to the SDK and repeats the
// kind instead (an option that changes nothing and allocates nothing).
func startAt(kind trace.SpanKind, t time.Time) trace.SpanStartOption {
	if d := time.Since(t); d < clockSlack && d > -clockSlack {
		return trace.WithSpanKind(kind)
	}
	return trace.WithTimestamp(t)
}

// endSpan sets the span's status from err and ends it at t.
func endSpan(span trace.Span, err error, t time.Time) {
	if err != nil {
		span.SetAttributes(keyErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	if d := time.Since(t); d < clockSlack && d > -clockSlack {
		span.End()
		return
	}
	span.End(trace.WithTimestamp(t))
}

// errorType is a low-cardinality name for an error: "timeout",
// "canceled", the Go type of the first error in its chain that is not a
// plain wrapper or errors.New text, or "_OTHER".
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	for err != nil {
		switch t := fmt.Sprintf("%T", err); t {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.errorString", "*errors.joinError":
		default:
			return t
		}
		err = errors.Unwrap(err)
	}
	return "_OTHER"
}

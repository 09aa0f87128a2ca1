// Package otelbus traces and measures a Postbus bus with OpenTelemetry.
//
// An Observer plugs into bus.Config.Observer:
//
//	obs, err := otelbus.New(otelbus.Options{
//		TracerProvider: tp, // default: otel.GetTracerProvider()
//		MeterProvider:  mp, // default: otel.GetMeterProvider()
//		Propagator:     nil, // default: W3C Trace Context and Baggage
//	})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Observer: obs})
//
// One Observer may serve several buses.
//
// # Spans
//
// Spans follow the OpenTelemetry messaging conventions
// (messaging.system, messaging.operation.type and .name,
// messaging.destination.name, messaging.message.id,
// messaging.message.conversation_id from the correlation ID, error.type):
//
//   - "send <destination>" (producer): Send, Publish or Reply of an
//     immediate message; "schedule <destination>" for one due later, and
//     for the copy a delayed retry stores. Its context is written into the
//     message's headers ("traceparent", "tracestate"), which travel through
//     the scheduled-message store with the message.
//   - "dispatch <destination>" (producer): the dispatcher's hand-over of a
//     due message, a new trace linked to the span that scheduled it.
//   - "receive <endpoint>" (consumer): one delivery until it is concluded,
//     with postbus.outcome (handled, retry_later, error_queue, expired,
//     returned) and postbus.attempts; events postbus.retry,
//     postbus.error_queue and postbus.expired.
//   - "process <endpoint>" (consumer): one attempt of the handlers, a child
//     of the delivery span, with postbus.attempt and postbus.outcome
//     (success, failure). The handlers' ctx carries it.
//   - "claim scheduled" and "settle scheduled": the dispatcher's batches.
//
// An immediate message's delivery is a child of its send span: one trace.
// A delayed message's delivery, like a delayed retry's, starts a trace of
// its own and links to the span that scheduled it, hours earlier perhaps,
// in another process: a trace does not stay open across a delay. With
// Options.DelayedAsChild it is a child instead, and one trace runs across
// the delay.
//
// # Metrics
//
// messaging.client.sent.messages, messaging.client.consumed.messages,
// messaging.process.duration, postbus.delivery.lateness (handling start −
// due time, seconds, buckets from 1 ms to 1 h), postbus.dispatch.lateness
// (hand-over − due time), postbus.retries, postbus.error_queue.messages,
// postbus.expired.messages, the observable counter
// postbus.recurring.occurrences (the occurrences of recurring schedules a
// bus stored, from bus.Metrics), and the observable gauges
// postbus.scheduled.backlog, postbus.scheduled.overdue,
// postbus.scheduled.oldest_overdue (from stores that implement
// bus.ScheduledBrowser, read through indexes), postbus.breaker.open,
// and, from bus.Bus.Health, postbus.scheduled.oldest_due_age (seconds:
// the age of the oldest due row of the bus's transport not handed over)
// and postbus.recurring.lag (seconds since the oldest tick of the bus's
// recurring schedules that passed without its occurrence stored).
// Labels are the destination or endpoint, the message type and one
// low-cardinality detail; never the message ID.
//
// Span and event times come from the bus's clock (bus.Config.Clock), so a
// test with a fake clock sees the times the bus saw.
package otelbus

package otelbus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/postbus/bus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LatenessBuckets are the bucket boundaries, in seconds, of the lateness
// histograms: from 1 ms to 1 h.
var LatenessBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}

// processBuckets are the bucket boundaries, in seconds, of
// messaging.process.duration (the conventions' advice).
var processBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// backlogTimeout bounds one reading of a bus's scheduled backlog during a
// collection.
const backlogTimeout = 5 * time.Second

type instruments struct {
	o *Observer
	// sets caches the attribute sets of measurements: building one sorts
	// and allocates, and a bus has few distinct label combinations.
	sets             sync.Map // setKey -> metric.MeasurementOption
	sentCount        metric.Int64Counter
	consumed         metric.Int64Counter
	processDuration  metric.Float64Histogram
	deliveryLateness metric.Float64Histogram
	dispatchLateness metric.Float64Histogram
	retries          metric.Int64Counter
	errorQueue       metric.Int64Counter
	expired          metric.Int64Counter
}

func newInstruments(o *Observer, m metric.Meter) (*instruments, error) {
	in := &instruments{o: o}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	in.sentCount, err = m.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages handed to the transport (send, dispatch) or stored for later (schedule)."))
	add(err)
	in.consumed, err = m.Int64Counter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries that reached the incoming pipeline."))
	add(err)
	in.processDuration, err = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one attempt of the handlers."), metric.WithExplicitBucketBoundaries(processBuckets...))
	add(err)
	in.deliveryLateness, err = m.Float64Histogram("postbus.delivery.lateness", metric.WithUnit("s"),
		metric.WithDescription("Handling start minus due time, for delayed messages and delayed retries."),
		metric.WithExplicitBucketBoundaries(LatenessBuckets...))
	add(err)
	in.dispatchLateness, err = m.Float64Histogram("postbus.dispatch.lateness", metric.WithUnit("s"),
		metric.WithDescription("Hand-over to the transport minus due time, for scheduled messages."),
		metric.WithExplicitBucketBoundaries(LatenessBuckets...))
	add(err)
	in.retries, err = m.Int64Counter("postbus.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Failed handler attempts that are retried, immediately or later."))
	add(err)
	in.errorQueue, err = m.Int64Counter("postbus.error_queue.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages moved to the error queue."))
	add(err)
	in.expired, err = m.Int64Counter("postbus.expired.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages discarded by a message timer."))
	add(err)

	backlog, err := m.Int64ObservableGauge("postbus.scheduled.backlog", metric.WithUnit("{message}"),
		metric.WithDescription("Scheduled messages in the store, leased or not."))
	add(err)
	overdue, err := m.Int64ObservableGauge("postbus.scheduled.overdue", metric.WithUnit("{message}"),
		metric.WithDescription("Scheduled messages due and not yet dispatched (capped at 10000)."))
	add(err)
	oldest, err := m.Float64ObservableGauge("postbus.scheduled.oldest_overdue", metric.WithUnit("s"),
		metric.WithDescription("How long the earliest overdue scheduled message has been due; 0 when none is."))
	add(err)
	breakerOpen, err := m.Int64ObservableGauge("postbus.breaker.open", metric.WithUnit("1"),
		metric.WithDescription("1 while a circuit breaker (store, fetch, dispatch) is open, else 0."))
	add(err)
	occurrences, err := m.Int64ObservableCounter("postbus.recurring.occurrences", metric.WithUnit("{message}"),
		metric.WithDescription("Occurrences of recurring schedules stored by the bus: ticks, catch-ups of missed ticks and triggers."))
	add(err)
	failedTicks, err := m.Int64ObservableCounter("postbus.recurring.failed", metric.WithUnit("{message}"),
		metric.WithDescription("Occurrences of recurring schedules that could not be built (their Message panicked or returned no valid message); the schedules went on."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		o.mu.Lock()
		buses := make([]*bus.Bus, 0, len(o.buses))
		for b := range o.buses {
			buses = append(buses, b)
		}
		breakers := make(map[breakerKey]bool, len(o.breakers))
		for k, v := range o.breakers {
			breakers[k] = v
		}
		o.mu.Unlock()
		for _, b := range buses {
			ep := metric.WithAttributes(o.system, keyEndpoint.String(b.Endpoint()))
			bm := b.Metrics()
			obs.ObserveInt64(occurrences, int64(bm.Recurring), ep)
			obs.ObserveInt64(failedTicks, int64(bm.RecurringFailed), ep)
			for _, name := range []string{"store", "fetch", "dispatch"} {
				v := int64(0)
				if breakers[breakerKey{b.Endpoint(), name}] {
					v = 1
				}
				obs.ObserveInt64(breakerOpen, v, metric.WithAttributes(o.system, keyEndpoint.String(b.Endpoint()), keyBreaker.String(name)))
			}
			bctx, cancel := context.WithTimeout(ctx, backlogTimeout)
			bl, err := b.ScheduledBacklog(bctx)
			cancel()
			if err != nil || !bl.Supported {
				continue // a failed reading leaves a gap rather than a wrong value
			}
			obs.ObserveInt64(backlog, bl.Count, ep)
			obs.ObserveInt64(overdue, bl.Overdue, ep)
			obs.ObserveFloat64(oldest, bl.OldestOverdue.Seconds(), ep)
		}
		return nil
	}, backlog, overdue, oldest, breakerOpen, occurrences, failedTicks)
	if err != nil {
		return nil, err
	}

	if err := registerHealthGauges(o, m); err != nil {
		return nil, err
	}
	return in, nil
}

// setKey names one combination of labels: the metric family, the
// destination (or endpoint), the message type and one more label.
type setKey struct {
	family, dest, typ, extra, extra2 string
}

// attrs returns the cached measurement option for k, building it with
// build the first time.
func (in *instruments) attrs(k setKey, build func() []attribute.KeyValue) metric.MeasurementOption {
	if v, ok := in.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	set := attribute.NewSet(build()...)
	v, _ := in.sets.LoadOrStore(k, metric.WithAttributeSet(set))
	return v.(metric.MeasurementOption)
}

// sent counts a message sent, scheduled or dispatched.
func (in *instruments) sent(ctx context.Context, env *bus.Envelope, op string, err error) {
	dest, et := destination(env), errorType(err)
	in.sentCount.Add(ctx, 1, in.attrs(setKey{"sent", dest, env.Type, op, et}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{in.o.system, keyOperationName.String(op), keyDestination.String(dest),
			keyMessageType.String(env.Type)}
		if et != "" {
			attrs = append(attrs, keyErrorType.String(et))
		}
		return attrs
	}))
}

// labels returns the cached option for the usual labels of family: system,
// destination, message type, and extra (when its value is not empty).
func (in *instruments) labels(family string, destKey attribute.Key, dest, typ string, extra attribute.Key, value string) metric.MeasurementOption {
	return in.attrs(setKey{family, dest, typ, value, ""}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{in.o.system, destKey.String(dest), keyMessageType.String(typ)}
		if value != "" {
			attrs = append(attrs, extra.String(value))
		}
		return attrs
	})
}

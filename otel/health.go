package otelbus

import (
	"context"
	"errors"

	"github.com/postbus/bus"
	"go.opentelemetry.io/otel/metric"
)

// registerHealthGauges registers the gauges read from each running bus's
// Health at every collection: postbus.scheduled.oldest_due_age and
// postbus.recurring.lag. A lag that could not be read leaves a gap.
func registerHealthGauges(o *Observer, m metric.Meter) error {
	oldestDue, err1 := m.Float64ObservableGauge("postbus.scheduled.oldest_due_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest scheduled message of the bus's transport that is due and not handed over (bus.HealthReport.DispatchLag); 0 when none."))
	recurringLag, err2 := m.Float64ObservableGauge("postbus.recurring.lag", metric.WithUnit("s"),
		metric.WithDescription("Time since the oldest tick of the bus's recurring schedules that passed without its occurrence stored (bus.HealthReport.RecurringLag); 0 when none."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		o.mu.Lock()
		buses := make([]*bus.Bus, 0, len(o.buses))
		for b := range o.buses {
			buses = append(buses, b)
		}
		o.mu.Unlock()
		for _, b := range buses {
			ep := metric.WithAttributes(o.system, keyEndpoint.String(b.Endpoint()))
			hctx, cancel := context.WithTimeout(ctx, backlogTimeout)
			h := b.Health(hctx)
			cancel()
			if h.DispatchLagErr == nil {
				obs.ObserveFloat64(oldestDue, h.DispatchLag.Seconds(), ep)
			}
			if h.RecurringLagErr == nil {
				obs.ObserveFloat64(recurringLag, h.RecurringLag.Seconds(), ep)
			}
		}
		return nil
	}, oldestDue, recurringLag)
	return err
}

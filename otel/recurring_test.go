package otelbus_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

type reportDue struct{}

// TestRecurringOccurrencesCounted: postbus.recurring.occurrences reports
// the occurrences each running bus stored, ticks and triggers alike.
func TestRecurringOccurrencesCounted(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC))
	b := newBus(t, bus.Config{Endpoint: "reports", Clock: clock, Observer: tel.obs}, func(b *bus.Bus) {
		bus.Handle(b, func(context.Context, reportDue) error { return nil })
		bus.Route[reportDue](b, "reports")
		if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
			Message: func(time.Time) any { return reportDue{} }}); err != nil {
			t.Fatal(err)
		}
	})
	if err := b.TriggerRecurring(testCtx(t), "hourly"); err != nil {
		t.Fatal(err)
	}
	want := int64(b.Metrics().Recurring)
	if want < 2 {
		t.Fatalf("the bus counts %d occurrences, want the ticks ahead and the trigger", want)
	}
	sum, ok := tel.collect(t)["postbus.recurring.occurrences"].Data.(metricdata.Sum[int64])
	if !ok || len(sum.DataPoints) != 1 || !sum.IsMonotonic || sum.DataPoints[0].Value != want {
		t.Fatalf("postbus.recurring.occurrences = %+v, want one monotonic point of %d", sum, want)
	}
	if v, _ := sum.DataPoints[0].Attributes.Value("postbus.endpoint"); v.AsString() != "reports" {
		t.Errorf("endpoint attribute = %q, want reports", v.AsString())
	}
}

// TestRecurringFailedTicksCounted: postbus.recurring.failed reports the
// occurrences whose Message failed.
func TestRecurringFailedTicksCounted(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC))
	b := newBus(t, bus.Config{Endpoint: "reports", Clock: clock, Observer: tel.obs}, func(b *bus.Bus) {
		bus.Handle(b, func(context.Context, reportDue) error { return nil })
		bus.Route[reportDue](b, "reports")
		if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
			Message: func(time.Time) any { panic("broken report") }}); err != nil {
			t.Fatal(err)
		}
	})
	want := int64(b.Metrics().RecurringFailed)
	if want < 2 {
		t.Fatalf("the bus counts %d failed occurrences, want the ticks ahead", want)
	}
	sum, ok := tel.collect(t)["postbus.recurring.failed"].Data.(metricdata.Sum[int64])
	if !ok || len(sum.DataPoints) != 1 || !sum.IsMonotonic || sum.DataPoints[0].Value != want {
		t.Fatalf("postbus.recurring.failed = %+v, want one monotonic point of %d", sum, want)
	}
}

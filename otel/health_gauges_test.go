package otelbus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// lateStore is an in-memory store whose claims find nothing, so due rows
// stay due, and which refuses recurring steps while refuse is set, so
// schedules fall behind.
type lateStore struct {
	*bus.MemoryPersistence
	refuse atomic.Bool
}

func (*lateStore) ClaimDueOutgoing(ctx context.Context, _ string, _ time.Time, _ int, _ time.Duration) ([]bus.OutgoingMessage, error) {
	return nil, ctx.Err()
}

func (*lateStore) ClaimOutgoingAhead(ctx context.Context, _ string, now time.Time, _ time.Duration, _ int, _ time.Duration) (bus.AheadClaim, error) {
	return bus.AheadClaim{Now: now}, ctx.Err()
}

func (s *lateStore) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if s.refuse.Load() {
		return false, errors.New("refused")
	}
	return s.MemoryPersistence.AdvanceRecurring(ctx, adv)
}

type lateReminder struct{}

func gaugeFloat(t testing.TB, m map[string]metricdata.Metrics, name string) float64 {
	t.Helper()
	g, ok := m[name].Data.(metricdata.Gauge[float64])
	if !ok || len(g.DataPoints) != 1 {
		t.Fatalf("%s: %+v, want one float64 gauge point", name, m[name].Data)
	}
	return g.DataPoints[0].Value
}

// postbus.scheduled.oldest_due_age is the age of the oldest due row not
// handed over, and postbus.recurring.lag the time since the oldest tick
// stored late, both in seconds, from the bus's health.
func TestHealthGauges(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	t0 := time.Date(2026, 1, 1, 9, 0, 30, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store := &lateStore{MemoryPersistence: bus.NewMemoryPersistence()}
	newBus(t, bus.Config{Endpoint: "reminders", Persistence: store, Clock: clock, Observer: tel.obs}, func(b *bus.Bus) {
		_ = bus.Route[lateReminder](b, "elsewhere")
		if err := b.AddRecurring(bus.Recurring{Name: "minutely", Schedule: bus.Every(time.Minute),
			Message: func(time.Time) any { return lateReminder{} }}); err != nil {
			t.Fatal(err)
		}
	})
	m := tel.collect(t)
	if age, lag := gaugeFloat(t, m, "postbus.scheduled.oldest_due_age"), gaugeFloat(t, m, "postbus.recurring.lag"); age != 0 || lag != 0 {
		t.Fatalf("at start: oldest_due_age %v, recurring.lag %v; want 0 and 0", age, lag)
	}
	// The schedule stored its ticks through 9:02; no step stores more, and
	// the dispatcher hands nothing over.
	store.refuse.Store(true)
	clock.Advance(5 * time.Minute) // 9:05:30
	m = tel.collect(t)
	// The oldest occurrence stored, for 9:01, was due 4m30s ago; the first
	// tick not stored, 9:03, passed 2m30s ago.
	if age := gaugeFloat(t, m, "postbus.scheduled.oldest_due_age"); age != 270 {
		t.Fatalf("oldest_due_age %v s, want 270", age)
	}
	if lag := gaugeFloat(t, m, "postbus.recurring.lag"); lag != 150 {
		t.Fatalf("recurring.lag %v s, want 150", lag)
	}
}

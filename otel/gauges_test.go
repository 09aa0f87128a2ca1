package otelbus_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// browsingStore is an in-memory store that answers StatsScheduled with
// fixed figures, as a database would from its indexes.
type browsingStore struct {
	*bus.MemoryPersistence
	stats bus.ScheduledStats
}

var _ bus.ScheduledBrowser = (*browsingStore)(nil)

func (s *browsingStore) ListScheduled(context.Context, bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	return nil, nil
}

func (s *browsingStore) GetScheduled(context.Context, string) (bus.OutgoingMessage, bool, error) {
	return bus.OutgoingMessage{}, false, nil
}

func (s *browsingStore) StatsScheduled(context.Context, time.Time) (bus.ScheduledStats, error) {
	return s.stats, nil
}

func (s *browsingStore) DueHistogram(context.Context, time.Time, time.Duration, int) ([]int64, error) {
	return nil, nil
}

func (s *browsingStore) SendNow(context.Context, string) (bool, error) { return false, nil }

// The backlog gauges read the store of every running bus; a stopped bus is
// no longer read.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(now)
	store := &browsingStore{MemoryPersistence: bus.NewMemoryPersistence(),
		stats: bus.ScheduledStats{Count: 42, Overdue: 3, OldestOverdue: now.Add(-90 * time.Second)}}
	b := newBus(t, bus.Config{Endpoint: "reminders", Persistence: store, Clock: clock, Observer: tel.obs}, nil)

	m := tel.collect(t)
	if got := gaugeInt(t, m, "postbus.scheduled.backlog"); got != 42 {
		t.Fatalf("backlog %d, want 42", got)
	}
	if got := gaugeInt(t, m, "postbus.scheduled.overdue"); got != 3 {
		t.Fatalf("overdue %d, want 3", got)
	}
	g, ok := m["postbus.scheduled.oldest_overdue"].Data.(metricdata.Gauge[float64])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 90 {
		t.Fatalf("oldest_overdue: %+v, want 90 s", m["postbus.scheduled.oldest_overdue"].Data)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := tel.collect(t)["postbus.scheduled.backlog"]; ok {
		t.Fatalf("a stopped bus is still measured")
	}
}

func gaugeInt(t testing.TB, m map[string]metricdata.Metrics, name string) int64 {
	t.Helper()
	g, ok := m[name].Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 {
		t.Fatalf("%s: %+v, want one int64 gauge point", name, m[name].Data)
	}
	return g.DataPoints[0].Value
}

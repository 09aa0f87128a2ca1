package e2e_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// TestDelayedTwoInstances: two instances of
// one endpoint (each its own pool and transport value, both dispatching and
// both consuming) schedule 2,000 messages due over 5 s in one PostgreSQL
// table. Every message is handled exactly once, none before its due time.
func TestDelayedTwoInstances(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kit  func(testing.TB) *kit
	}{
		{"rabbitmq", rabbitKit},
		{"nats", func(t testing.TB) *kit { return natsKit(t, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			delayedTwoInstances(t, tc.kit(t))
		})
	}
}

func delayedTwoInstances(t *testing.T, k *kit) {
	const n, spread = 2000, 5 * time.Second
	pool1, pool2 := newPool(t, 10), newPool(t, 10)
	schema := freshSchema(t, pool1)
	store1, store2 := newStore(t, pool1, schema), newStore(t, pool2, schema)
	rec := newRecorder()
	register := func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	}
	b1 := startBus(t, k.config(k.newTransport(t, ""), store1), register)
	b2 := startBus(t, k.config(k.newTransport(t, ""), store2), register)

	start := time.Now()
	first := start.Add(25 * time.Second) // scheduling takes under 2 s on an idle machine, 17 s was seen under load
	schedule(t, rec, []*bus.Bus{b1, b2}, k.endpoint, "two", n, first, spread)
	t.Logf("scheduled %d messages in %v", n, time.Since(start).Round(time.Millisecond))
	if m1, m2 := b1.Metrics(), b2.Metrics(); m1.Scheduled+m2.Scheduled != n {
		t.Errorf("scheduled %d+%d messages through the store, want %d (some were sent late, at once)", m1.Scheduled, m2.Scheduled, n)
	}
	rec.waitAll(t, 90*time.Second)
	// Each instance deletes a row only after the transport accepted it, so
	// an empty table and n handled messages settle the count.
	drivertest.Eventually(t, 30*time.Second, func() bool {
		rows, _ := storeStats(t, pool1, store1.Table())
		return rows == 0 && b1.Metrics().Handled+b2.Metrics().Handled >= n
	}, "an empty table and every handler done")
	m1, m2 := b1.Metrics(), b2.Metrics()
	t.Logf("instance 1 dispatched %d handled %d; instance 2 dispatched %d handled %d; last handled %v after the first due time",
		m1.Dispatched, m1.Handled, m2.Dispatched, m2.Handled, time.Since(first).Round(time.Millisecond))
	if d := m1.Dispatched + m2.Dispatched; d != n {
		t.Errorf("dispatched %d times, want %d", d, n)
	}
	if m1.Dispatched == 0 || m2.Dispatched == 0 || m1.Handled == 0 || m2.Handled == 0 {
		t.Errorf("both instances should dispatch and consume: %+v / %+v", m1, m2)
	}
	rec.check(t, true)
}

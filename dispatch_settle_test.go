package bus_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Every failed hand-over is recorded, however many batches fail within a
// second at the default MaximumRecoveryFailuresPerSecond (1): recordings
// over the limit wait for their slot rather than leave their rows leased.
// So after an outage of the transport every row comes back after its
// backoff, well before its one-minute lease.
func TestDispatchFailuresOverTheRecordingLimitAreNotLeftLeased(t *testing.T) {
	t.Parallel()
	eachDispatchMode(t, func(t *testing.T, lookAhead time.Duration) {
		var down atomic.Bool
		down.Store(true)
		tr := &rejecting{Transport: bus.NewMemoryTransport(), reject: func(q string, _ *bus.Envelope) bool { return down.Load() }}
		in := bustest.NewRecorder[PlaceOrder]()
		b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Dispatcher: bus.DispatcherConfig{
			Lease: time.Minute, BatchSize: 5, RetryBackoff: 100 * time.Millisecond, LookAhead: lookAhead,
		}}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
		const n = 30
		for range n {
			if err := b.Send(t.Context(), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(100*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		// Let several batches fail, well within the lease.
		drivertest.Eventually(t, 10*time.Second, func() bool { return tr.count.Load() >= 3*5 }, "three failed batches")
		time.Sleep(500 * time.Millisecond) // more batches fail within the second: recordings over the limit
		down.Store(false)
		drivertest.Eventually(t, 15*time.Second, func() bool { return in.Len() >= n },
			"all %d messages within 15 s of the transport's return (lease 1 min): failed rows were left leased", n)
	})
}

// A stream of rows falling due one every 2 ms is deleted in one or two
// calls, not one every few rows: a look-ahead dispatcher deletes the rows
// it delivered together, up to 100 ms after the first of them (or once no
// row is held). Each row still arrives once and is deleted.
func TestLookAheadDeletesAStreamOfDeliveredRowsTogether(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store, mem := &heldCounting{MemoryPersistence: bus.NewMemoryPersistence()}, bus.NewMemoryTransport()
	sender := bustest.StartBus(t, bus.Config{Endpoint: "sender", SendOnly: true, Transport: mem, Persistence: store, Clock: clock}, nil)
	const n = 45 // due from 10 ms to 98 ms
	for i := range n {
		due := t0.Add(10*time.Millisecond + time.Duration(i)*2*time.Millisecond)
		must(t, sender.Send(ctxT(t), PlaceOrder{ID: fmt.Sprint(i)}, bus.To("sales"), bus.DeliverAt(due)))
	}
	in := bustest.NewRecorder[PlaceOrder]()
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: mem, Persistence: store, Clock: clock},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	for (in.Len() < n || store.Len() > 0) && clock.Now().Before(t0.Add(time.Second)) {
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(time.Millisecond)
	}
	in.WaitFor(t, n)
	drivertest.Eventually(t, 15*time.Second, func() bool { return store.Len() == 0 }, "the delivered rows to be deleted")
	if got := in.Len(); got != n {
		t.Errorf("%d deliveries of %d rows", got, n)
	}
	if got := store.deletes.Load(); got > 2 {
		t.Errorf("%d delete calls for %d rows delivered within 90 ms, want at most 2", got, n)
	}
}

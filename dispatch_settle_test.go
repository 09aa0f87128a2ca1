package bus_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// Every failed hand-over is recorded, however many batches fail within a
// second at the default MaximumRecoveryFailuresPerSecond (1): recordings
// over the limit wait for their slot rather than leave their rows leased.
// So after an outage of the transport every row comes back after its
// backoff, well before its one-minute lease.
func TestDispatchFailuresOverTheRecordingLimitAreNotLeftLeased(t *testing.T) {
	t.Parallel()
	for _, lookAhead := range []time.Duration{0, -1} {
		t.Run(map[time.Duration]string{0: "look-ahead", -1: "claim-when-due"}[lookAhead], func(t *testing.T) {
			t.Parallel()
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
			deadline := time.Now().Add(10 * time.Second)
			for tr.count.Load() < 3*5 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			down.Store(false)
			for deadline := time.Now().Add(15 * time.Second); in.Len() < n && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := in.Len(); got < n {
				t.Errorf("%d of %d messages arrived within 15 s of the transport's return (lease 1 min): failed rows were left leased", got, n)
			}
		})
	}
}

package bus_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// TestRetriedFailuresDoNotCountAsLate: a scheduled message that failed and
// is retried from the failed-message store or replayed from the error
// queue minutes later is not a late scheduled delivery: lateness counts
// only scheduled deliveries, from their own due time.
func TestRetriedFailuresDoNotCountAsLate(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(now)
	tr := bus.NewMemoryTransport()
	mem := bus.NewMemoryPersistence()
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Clock: clock, Logger: quiet()},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })

	failedCopy := func(id string) *bus.Envelope {
		env := envelopeOf(t, PlaceOrder{ID: id})
		env.DueAt = now.Add(-8 * time.Minute) // it was due, and failed, 8 minutes ago
		env.SetHeader(bus.HeaderFailureQueue, "sales")
		env.SetHeader(bus.HeaderFailureReason, "bug")
		env.SetHeader(bus.HeaderFailureTime, now.Add(-7*time.Minute).Format(time.RFC3339Nano))
		return env
	}
	if err := mem.StoreFailed(ctxT(t), []bus.FailedMessage{bus.FailedFromEnvelope(failedCopy("stored"), now)}); err != nil {
		t.Fatal(err)
	}
	if n, err := bus.RetryFailed(ctxT(t), tr, mem, []string{"env-stored"}); err != nil || n != 1 {
		t.Fatalf("RetryFailed = %d, %v; want 1", n, err)
	}
	in.WaitFor(t, 1)
	if err := tr.Send(ctxT(t), "error", failedCopy("queued")); err != nil {
		t.Fatal(err)
	}
	replayed := make(chan int, 1)
	go func() {
		n, _ := b.Replay(ctxT(t), bus.ReplayOptions{Max: 1})
		replayed <- n
	}()
	in.WaitFor(t, 2)
	clock.Advance(time.Hour) // end the replay's idle wait
	if n := <-replayed; n != 1 {
		t.Fatalf("Replay moved %d, want 1", n)
	}
	if m := b.Metrics(); m.LatenessP50 != 0 || m.LatenessP99 != 0 {
		t.Errorf("lateness p50 %v p99 %v after two retried failures, want 0 (no scheduled delivery)", m.LatenessP50, m.LatenessP99)
	}
}

package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// TestPastDueTimeIsKeptOnTheEnvelope: a send whose due time has passed goes
// out at once, needs no scheduled store, and keeps the requested due time
// in Envelope.DueAt, so it is the same message as a copy the dispatcher
// sent at that due time (transports de-duplicate by ID and due time). Its
// time to be received runs from when it was sent, and its lateness counts
// from its send, not from a due time that had passed before. DeliverAfter(0)
// has no due time.
func TestPastDueTimeIsKeptOnTheEnvelope(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(now)
	got := make(chan *bus.Envelope, 2)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: plainPersistence{}, Clock: clock, Logger: quiet()},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(ctx context.Context, _ PlaceOrder) error {
				got <- bus.IncomingMessage(ctx)
				return nil
			})
		})
	due := now.Add(-time.Hour)
	if err := b.Send(ctxT(t), PlaceOrder{ID: "late"}, bus.To("sales"), bus.DeliverAt(due), bus.TimeToBeReceived(time.Minute)); err != nil {
		t.Fatalf("Send with a past DeliverAt: %v", err)
	}
	env := <-got
	if !env.DueAt.Equal(due) {
		t.Errorf("DueAt = %v, want the requested %v", env.DueAt, due)
	}
	if want := now.Add(time.Minute); !env.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v (a minute from the send)", env.ExpiresAt, want)
	}
	if m := b.Metrics(); m.LatenessP99 != 0 {
		t.Errorf("lateness p99 %v, want 0: the message was handled when it was sent", m.LatenessP99)
	}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "now"}, bus.To("sales"), bus.DeliverAfter(0)); err != nil {
		t.Fatal(err)
	}
	if env := <-got; !env.DueAt.IsZero() {
		t.Errorf("DeliverAfter(0): DueAt = %v, want zero", env.DueAt)
	}
}

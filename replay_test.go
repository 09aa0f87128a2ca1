package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestReplayMovesErrorQueueBack(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var broken atomic.Bool
	broken.Store(true)
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			if broken.Load() {
				return errors.New("bug")
			}
			return in.Handler(ctx, m)
		})
	})
	for _, id := range []string{"a", "b", "skip"} {
		if err := b.Send(ctxT(t), PlaceOrder{ID: id}, bus.To("sales"), bus.WithMessageID(id)); err != nil {
			t.Fatal(err)
		}
	}
	waitLen(t, tr, "error", 3)
	broken.Store(false) // the bug is fixed
	n, err := b.Replay(ctxT(t), bus.ReplayOptions{IdleTimeout: 200 * time.Millisecond,
		Filter: func(e *bus.Envelope) bool { return e.ID != "skip" }})
	if err != nil || n != 2 {
		t.Fatalf("Replay = %d, %v; want 2", n, err)
	}
	in.WaitFor(t, 2)
	for _, e := range in.Envelopes() {
		if e.Header(bus.HeaderFailureReason) != "" {
			t.Errorf("replayed message kept failure headers: %v", e.Headers)
		}
	}
	if tr.Len("error") != 1 {
		t.Errorf("error queue has %d, want the skipped one", tr.Len("error"))
	}
	if n, err := b.Replay(ctxT(t), bus.ReplayOptions{Max: 1, IdleTimeout: 200 * time.Millisecond}); err != nil || n != 1 {
		t.Errorf("second Replay = %d, %v; want 1", n, err)
	}
	in.WaitFor(t, 3)
}

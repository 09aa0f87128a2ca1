package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// A Receive with few handlers still has enough messages on their way for
// short handlers: the prefetch is four times the concurrency, at least 32.
// With one handler held, the broker hands the consumer 32 messages and
// keeps the rest ready.
func TestPrefetchFromConcurrencyHasAFloor(t *testing.T) {
	t.Parallel()
	e, tr, q := provisionedQueue(t, "prefetch")
	const n = 100
	for range n {
		if err := tr.Send(ctxT(t, 10*time.Second), q, newEnvelope("test.Msg", []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	stop := receive(t, tr, q, 1, func(ctx context.Context, _ *bus.Envelope) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	defer stop()
	defer close(release)
	drivertest.Eventually(t, 10*time.Second, func() bool { return e.ready(q) == n-32 }, "32 messages prefetched")
	time.Sleep(200 * time.Millisecond) // and no more
	if got := e.ready(q); got != n-32 {
		t.Errorf("%d messages ready with one handler held, want %d (a prefetch of 32)", got, n-32)
	}
}

package drivertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// Receiver is the part of a transport Receive needs.
type Receiver interface {
	Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error
}

// Receive runs tr.Receive on queue in the background until the returned
// stop is called; stop waits for Receive to return and reports its error
// on tb, or that it did not return within 30 seconds of its context
// ending. Calling stop again does nothing. Call it before the transport
// is closed.
func Receive(tb testing.TB, tr Receiver, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Receive(ctx, queue, opts, h) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("receive %s: %v", queue, err)
				}
			case <-time.After(30 * time.Second):
				tb.Errorf("receive %s did not return after its context ended", queue)
			}
		})
	}
}

// ReceiveUntilEnd runs tr.Receive on queue with conc handlers until the
// test ends (see Receive).
func ReceiveUntilEnd(tb testing.TB, tr Receiver, queue string, conc int, h bus.DeliveryHandler) {
	tb.Helper()
	tb.Cleanup(Receive(tb, tr, queue, bus.ReceiveOptions{Concurrency: conc}, h))
}

// CountReceived receives queue with Concurrency 8 until the test ends and
// counts each message in the returned countdown of n: the consumer of a
// send→handler benchmark. It keeps nothing of what arrives, so the
// benchmark measures the transport, not the test's bookkeeping.
func CountReceived(tb testing.TB, tr Receiver, queue string, n int64) *bustest.Countdown {
	tb.Helper()
	handled := bustest.NewCountdown(n)
	tb.Cleanup(Receive(tb, tr, queue, bus.ReceiveOptions{Concurrency: 8}, func(context.Context, *bus.Envelope) error {
		handled.Done()
		return nil
	}))
	return handled
}

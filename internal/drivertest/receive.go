package drivertest

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// Receiver is the part of a transport Receive needs.
type Receiver interface {
	Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error
}

// Receive runs tr.Receive on queue in the background, as a benchmark's
// consumer does, until the returned stop is called; stop waits for Receive
// to return and reports its error on tb. Call stop before the transport is
// closed.
func Receive(tb testing.TB, tr Receiver, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Receive(ctx, queue, opts, h) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	}
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

package drivertest

import (
	"context"
	"testing"

	"github.com/postbus/bus"
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

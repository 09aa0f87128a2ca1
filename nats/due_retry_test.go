package nats_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestNATSDelayedSendRetriedAfterItsDueTimeIsDeliveredOnce: a caller's
// delayed Send reports a failure although its row was stored; the
// dispatcher hands the row over at its due time, and then the caller
// retries the Send (same message ID and DeliverAt), which now goes out at
// once. Both copies carry the requested due time, so the stream's
// duplicate window keeps one and the receiver handles it once.
func TestNATSDelayedSendRetriedAfterItsDueTimeIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	ns := bustest.Namespace()
	endpoint, queue := ns+"-sender", ns+"-billing"
	start := time.Now().UTC().Truncate(time.Millisecond)
	clock := bustest.NewFakeClock(start)
	store := bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: endpoint, Transport: tr, Persistence: store, Clock: clock, Logger: drivertest.Logger()}, nil)
	due := start.Add(time.Minute)
	send := func() error {
		return b.Send(drivertest.Ctx(t, 0), replayPing{N: 1}, bus.To(queue), bus.DeliverAt(due), bus.WithMessageID(ns+"-m1"))
	}
	if err := send(); err != nil { // stored; say the caller saw an error here
		t.Fatalf("Send: %v", err)
	}
	clock.Advance(2 * time.Minute)
	drivertest.Eventually(t, 30*time.Second, func() bool { return store.Len() == 0 }, "the dispatcher to hand the row over")
	if got := streamMsgs(t, nc, opts); got != 1 {
		t.Fatalf("the stream holds %d messages after the dispatch, want 1", got)
	}
	if err := send(); err != nil { // the caller's retry, after the due time
		t.Fatalf("retried Send: %v", err)
	}
	if got := streamMsgs(t, nc, opts); got != 1 {
		t.Errorf("the stream holds %d copies of one message dispatched and retried, want 1", got)
	}
	expectHandledOnce(t, tr, nc, opts, queue, ns+"-m1")
}

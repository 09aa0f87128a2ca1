package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/faultproxy"
)

// An acknowledgement lost in a connection cut is tried again once the
// connection is back, while the message is still the consumer's: it is
// handled once, and not again by another consumer after the lease. The
// client does not retry commands itself, so the transport meets the cut.
func TestAcknowledgementLostInACutIsRetried(t *testing.T) {
	t.Parallel()
	direct := connect(t)
	proxy, err := faultproxy.Listen(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cut := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = cut.Close() })
	opts := namespace(t, direct)
	opts.Lease = 3 * time.Second
	opts.ClaimInterval = 200 * time.Millisecond
	ctx := drivertest.Ctx(t, 0)
	const queue = "ackcut"
	first := mustNew(t, cut, opts)
	if err := first.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int64
	handled := make(chan struct{})
	h := func(ctx context.Context, _ *bus.Envelope) error {
		if deliveries.Add(1) == 1 {
			// Cut the first consumer off as its handler returns, for a
			// third of the lease: its acknowledgement meets the cut.
			proxy.Cut()
			time.AfterFunc(opts.Lease/3, proxy.Restore)
			close(handled)
		}
		return nil
	}
	receive(t, first, queue, 1, h)
	if err := first.Send(ctx, queue, command(queue, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("the message was not handled")
	}
	// A second consumer takes over whatever stays unacknowledged for a lease.
	receive(t, mustNew(t, direct, opts), queue, 1, h)
	time.Sleep(3 * opts.Lease)
	if n := deliveries.Load(); n != 1 {
		t.Errorf("handled %d times, want once: the acknowledgement lost in the cut was not tried again", n)
	}
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

func TestTransportConformance(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb) // one prefix: the suite's cases have names of their own
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		return mustNew(t, rdb, opts)
	}, bustest.Features{NativeRedelivery: true})
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rdb.Close()
	for _, o := range []redis.Options{{Lease: time.Millisecond}, {Block: time.Microsecond}, {Prefetch: -2}, {MaxLen: -1}, {ClaimBatch: -1}} {
		_, err := redis.New(rdb, o)
		var oe *redis.OptionsError
		if !errors.Is(err, redis.ErrInvalidOptions) || !errors.As(err, &oe) {
			t.Errorf("New(%+v) = %v, want an *OptionsError", o, err)
		}
	}
	_, err := redis.New(nil, redis.Options{})
	drivertest.TypedError[*redis.OptionsError](t, err, redis.ErrInvalidOptions, "redis: invalid options: client: must not be nil")
	tr, err := redis.New(rdb, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Send(context.Background(), "", &bus.Envelope{ID: "x"})
	drivertest.TypedError[*redis.NameError](t, err, redis.ErrInvalidName, `redis: invalid queue "": must not be empty`)
	if err := tr.Publish(context.Background(), &bus.Envelope{ID: "x"}); !errors.Is(err, redis.ErrInvalidName) {
		t.Errorf("Publish without a type = %v, want ErrInvalidName", err)
	}
	if got := tr.Identity(); got != "redis:postbus" {
		t.Errorf("Identity = %q", got)
	}
	_ = tr.Close(context.Background())
	if err := tr.Send(context.Background(), "q", &bus.Envelope{ID: "x"}); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}

// collector receives a queue in the background and records what arrived.
type collector struct {
	mu     sync.Mutex
	got    map[string]int
	signal chan struct{}
}

func newCollector() *collector {
	return &collector{got: map[string]int{}, signal: make(chan struct{}, 1)}
}

func (c *collector) add(id string) {
	c.mu.Lock()
	c.got[id]++
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) waitFor(t testing.TB, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for c.count() < n {
		select {
		case <-c.signal:
		case <-deadline:
			t.Fatalf("received %d distinct messages, want %d within %v", c.count(), n, within)
		}
	}
}

// receive runs Receive until the test ends.
func receive(t testing.TB, tr *redis.Transport, queue string, conc int, h bus.DeliveryHandler) {
	t.Helper()
	drivertest.ReceiveUntilEnd(t, tr, queue, conc, h)
}

// A consumer that read messages and went silent (a raw XREADGROUP that
// never acknowledges) loses them to a live consumer once they are idle for
// longer than the lease; each arrives with its ID.
func TestIdleMessagesAreTakenOver(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb)
	opts.Lease = time.Second
	tr := mustNew(t, rdb, opts)
	ctx := drivertest.Ctx(t, 0)
	const queue, n = "takeover", 5
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i := range n {
		env := command(queue, i)
		ids[env.ID] = true
		if err := tr.Send(ctx, queue, env); err != nil {
			t.Fatal(err)
		}
	}
	key := opts.Prefix + ":q:" + queue
	res, err := rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: queue, Consumer: "silent", Streams: []string{key, ">"}, Count: n}).Result()
	if err != nil || len(res[0].Messages) != n {
		t.Fatalf("silent consumer read %v, %v", res, err)
	}
	readAt := time.Now()
	c := newCollector()
	var mu sync.Mutex
	var first time.Time
	receive(t, tr, queue, 2, func(_ context.Context, env *bus.Envelope) error {
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		mu.Unlock()
		c.add(env.ID)
		return nil
	})
	c.waitFor(t, n, 30*time.Second)
	for id := range c.got {
		if !ids[id] {
			t.Errorf("unexpected message %s", id)
		}
	}
	if d := first.Sub(readAt); d < opts.Lease {
		t.Errorf("taken over %v after the read, before the lease of %v", d, opts.Lease)
	}
	deadline := time.Now().Add(10 * time.Second) // acknowledgements are batched, after the handler
	for {
		l, err := rdb.XLen(ctx, key).Result()
		if err == nil && l == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream holds %d entries after handling (%v), want 0", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A slow handler keeps its message past the lease (its claim is renewed),
// and a handler whose message another consumer takes over sees its ctx
// cancelled.
func TestLeaseRenewedAndLossCancels(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb)
	opts.Lease = time.Second
	tr := mustNew(t, rdb, opts)
	ctx := drivertest.Ctx(t, 0)
	const queue = "renew"
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	key := opts.Prefix + ":q:" + queue
	started := make(chan string, 2)
	cancelled := make(chan string, 2)
	slow := command(queue, 1)
	receive(t, tr, queue, 2, func(hctx context.Context, env *bus.Envelope) error {
		started <- env.ID
		if env.ID == slow.ID {
			select {
			case <-time.After(3 * opts.Lease):
				return nil
			case <-hctx.Done():
				cancelled <- env.ID
				return hctx.Err()
			}
		}
		<-hctx.Done()
		cancelled <- env.ID
		return hctx.Err()
	})
	if err := tr.Send(ctx, queue, slow); err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != slow.ID {
		t.Fatalf("started %s", id)
	}
	// Another consumer trying to take over idle messages finds none: the
	// claim is renewed while the handler runs.
	deadline := time.Now().Add(3 * opts.Lease)
	for time.Now().Before(deadline) {
		msgs, _, err := rdb.XAutoClaim(ctx, &goredis.XAutoClaimArgs{Stream: key, Group: queue, Consumer: "thief", MinIdle: opts.Lease, Start: "0-0", Count: 10}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			t.Fatalf("a message in hand was idle for longer than the lease")
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case id := <-cancelled:
		t.Fatalf("slow handler of %s cancelled", id)
	default:
	}
	// Now one is stolen outright: its handler's ctx ends.
	stolen := command(queue, 2)
	if err := tr.Send(ctx, queue, stolen); err != nil {
		t.Fatal(err)
	}
	<-started
	pend, err := rdb.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: key, Group: queue, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pend {
		if err := rdb.XClaim(ctx, &goredis.XClaimArgs{Stream: key, Group: queue, Consumer: "thief", Messages: []string{p.ID}}).Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.XAck(context.Background(), key, queue, p.ID) // the thief settles at the end
	}
	select {
	case id := <-cancelled:
		if id != stolen.ID {
			t.Errorf("cancelled %s, want the stolen %s", id, stolen.ID)
		}
	case <-time.After(10 * opts.Lease):
		t.Fatal("the handler of a message taken over was not cancelled")
	}
}

// Publish reaches the stream of each subscriber, and a failed message is
// handed back and delivered again with its ID.
func TestPublishAndRequeue(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb)
	tr := mustNew(t, rdb, opts)
	ctx := drivertest.Ctx(t, 0)
	for _, q := range []string{"a", "b"} {
		if err := tr.Provision(ctx, bus.Topology{Queue: q, Events: []string{"redistest.Evt"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Provision(ctx, bus.Topology{Queue: "a", Events: []string{"redistest.Evt"}}); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	env := command("", 1)
	env.Type, env.Kind = "redistest.Evt", bus.KindEvent
	if err := tr.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		c := newCollector()
		var mu sync.Mutex
		tries := 0
		receive(t, tr, q, 1, func(_ context.Context, e *bus.Envelope) error {
			mu.Lock()
			tries++
			first := tries == 1
			mu.Unlock()
			if first {
				return errors.New("first delivery fails")
			}
			c.add(e.ID)
			return nil
		})
		c.waitFor(t, 1, 10*time.Second)
		if c.got[env.ID] != 1 {
			t.Errorf("queue %s got %v, want %s once", q, c.got, env.ID)
		}
	}
}

// Receive returns an error, instead of retrying for ever, once the client
// it reads with is closed.
func TestReceiveEndsWhenClientClosed(t *testing.T) {
	t.Parallel()
	shared := connect(t)
	opts := namespace(t, shared)
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	tr := mustNew(t, rdb, opts)
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: "closing"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- tr.Receive(context.Background(), "closing", bus.ReceiveOptions{Concurrency: 1}, func(context.Context, *bus.Envelope) error { return nil })
	}()
	time.Sleep(100 * time.Millisecond)
	_ = rdb.Close()
	select {
	case err := <-done:
		if !errors.Is(err, goredis.ErrClosed) {
			t.Errorf("Receive = %v, want goredis.ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Receive still running 30s after its client was closed")
	}
}

// TestOneConsumerHandlesInStreamOrder checks that a Receive with
// Concurrency 1 starts the messages it read ahead in the order of the
// stream: a message sent later must not overtake one that waits for the
// handler (its time-to-be-received would otherwise be judged too early).
func TestOneConsumerHandlesInStreamOrder(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	tr := mustNew(t, rdb, namespace(t, rdb))
	ctx := drivertest.Ctx(t, 0)
	if err := tr.Provision(ctx, bus.Topology{Queue: "ordered"}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		if err := tr.Send(ctx, "ordered", command("ordered", i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []string
	done := make(chan struct{})
	receive(t, tr, "ordered", 1, func(_ context.Context, e *bus.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, string(e.Body))
		if len(order) == n {
			close(done)
		}
		return nil
	})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not all messages handled within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, body := range order {
		if want := fmt.Sprintf(`{"N":%d}`, i); body != want {
			t.Fatalf("message %d handled was %s, want %s", i, body, want)
		}
	}
}

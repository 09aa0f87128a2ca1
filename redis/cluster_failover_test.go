package redis_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

type due struct{ N int }

// On a cluster of its own, a master is killed (SIGKILL) while scheduled
// messages fall due. With WaitReplicas 1 every stored message was on the
// master's replica before Send returned, and the replica takes over: no
// message is lost and none is handed over early. A message may be handed
// over twice: a claim or delete that the killed master applied but had
// not yet passed to its replica is undone by the failover, so the message
// is claimable again (at least once delivery; the count is logged).
func TestClusterFailoverLosesNoMessageWithWait(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster of its own and waits for a failover")
	}
	startedCluster(t) // skips when redis-server is not installed
	c, err := startCluster()
	if err != nil {
		t.Fatalf("start a cluster for the failover: %v", err)
	}
	t.Cleanup(c.stop)
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.addrs, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: 5})
	t.Cleanup(func() { _ = rdb.Close() })
	store := newPersistence(t, rdb, redis.PersistenceOptions{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if !store.Durable() {
		t.Error("Durable() = false with WaitReplicas 1 and a replica per master")
	}
	endpoint := drivertest.Unique("failover-")
	var (
		mu    sync.Mutex
		got   = map[int]int{}
		early = map[int]time.Duration{}
	)
	rec := bustest.NewRecorder[due]()
	b, err := bus.New(bus.Config{Endpoint: endpoint, Persistence: store, Logger: drivertest.Logger(),
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond, Lease: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(b, func(ctx context.Context, m due) error {
		env := bus.IncomingMessage(ctx)
		mu.Lock()
		got[m.N]++
		if d := time.Until(env.DueAt); d > 0 {
			early[m.N] = d
		}
		mu.Unlock()
		return rec.Handler(ctx, m)
	}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[due](b, endpoint); err != nil {
		t.Fatal(err)
	}
	ctx := drivertest.Ctx(t, 3*time.Minute)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	const n = 300
	first := time.Now().Add(2 * time.Second)
	for i := range n {
		if err := b.Send(ctx, due{N: i}, bus.DeliverAt(first.Add(time.Duration(i)*20*time.Millisecond))); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	// Kill a master while the messages fall due (from 2 s to 8 s ahead).
	time.Sleep(time.Until(first.Add(time.Second)))
	var victim string
	_ = rdb.ForEachMaster(ctx, func(_ context.Context, m *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if victim == "" {
			victim = m.Options().Addr
		}
		return nil
	})
	if err := c.nodes[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill master %s: %v", victim, err)
	}
	t.Logf("killed master %s", victim)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		delivered := len(got)
		mu.Unlock()
		if delivered == n {
			break
		}
		if time.Now().After(deadline) {
			for _, addr := range c.addrs {
				if addr != victim {
					survivor := goredis.NewClient(&goredis.Options{Addr: addr})
					nodes, err := survivor.ClusterNodes(context.Background()).Result()
					_ = survivor.Close()
					t.Logf("cluster nodes seen from %s: %v\n%s", addr, err, nodes)
					break
				}
			}
			next, ok, err := store.NextDueOutgoing(ctx, "")
			t.Logf("next due: %v %v %v", next, ok, err)
			rows, err := store.ClaimDueOutgoing(ctx, "", time.Now(), 10, time.Second)
			t.Logf("claim: %d rows, %v", len(rows), err)
			st, err := store.StatsScheduled(ctx, time.Now())
			t.Logf("stats: %+v %v", st, err)
			t.Fatalf("%d of %d messages delivered 2 minutes after the failover: lost", delivered, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for i := range n {
		if got[i] > 1 {
			twice++
		}
	}
	for i, d := range early {
		t.Errorf("message %d handed over %v before it was due", i, d)
	}
	t.Logf("failover of %s: %d messages, 0 lost, %d handed over more than once", victim, n, twice)
}

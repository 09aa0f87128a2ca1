package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

func TestClusterScheduledMessages(t *testing.T) {
	rdb := connectCluster(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

// Every partition has a replica: with WaitReplicas 1 writes return once
// it has them, and the store counts as durable.
func TestClusterScheduledMessagesWaitingForReplicas(t *testing.T) {
	rdb := connectCluster(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		p := newPersistence(t, rdb, redis.PersistenceOptions{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
		if !p.Durable() {
			t.Errorf("Durable() = false with WaitReplicas 1 on a cluster whose masters each have a replica")
		}
		return p
	})
}

// With 3 masters, each holds a third of the rows (±15%) over the default
// partitions.
func TestClusterSpreadsRowsOverMasters(t *testing.T) {
	t.Parallel()
	rdb := connectCluster(t)
	prefix := drivertest.Unique("pbtest:")
	p := newPersistence(t, rdb, redis.PersistenceOptions{Prefix: prefix})
	const n = 30_000
	msgs := make([]bus.OutgoingMessage, n)
	due := time.Now().Add(time.Hour)
	for i := range msgs {
		msgs[i] = bus.OutgoingMessage{ID: drivertest.ID(), Envelope: []byte("x"), DueAt: due, Transport: "spread"}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		counts []int
	)
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		k := 0
		iter := c.Scan(ctx, 0, "{"+prefix+":*}:m:*", 5000).Iterator()
		for iter.Next(ctx) {
			k++
		}
		mu.Lock()
		counts = append(counts, k)
		mu.Unlock()
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	if len(counts) != 3 || total != n {
		t.Fatalf("rows per master %v (total %d), want 3 masters holding %d", counts, total, n)
	}
	for _, k := range counts {
		if share := float64(k) / n; share < (1.0/3)*0.85 || share > (1.0/3)*1.15 {
			t.Errorf("a master holds %d of %d rows (%.1f%%), want a third ±15%%: %v", k, n, 100*share, counts)
		}
	}
	t.Logf("rows per master: %v", counts)
	if next, ok, err := p.NextDueOutgoing(ctx, "spread"); err != nil || !ok || next.Before(due.Add(-time.Microsecond)) {
		t.Errorf("NextDueOutgoing = %v, %v, %v; want about %v", next, ok, err, due)
	}
}

func TestClusterScheduledBrowser(t *testing.T) {
	rdb := connectCluster(t)
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

func TestClusterFailedStore(t *testing.T) {
	rdb := connectCluster(t)
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

func TestClusterSagas(t *testing.T) {
	rdb := connectCluster(t)
	bustest.SagaTests(t, func(t *testing.T) bus.SagaStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

func TestPersistenceScheduledMessages(t *testing.T) {
	rdb := connect(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

// With one partition every row is in one sorted set: the contract holds
// there too.
func TestPersistenceScheduledMessagesOnePartition(t *testing.T) {
	rdb := connect(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{Partitions: 1})
	})
}

// Claimers in different processes (clients) claim each row once.
func TestPersistenceClaimersOnTwoClients(t *testing.T) {
	t.Parallel()
	prefix := drivertest.Unique("pbtest:")
	a := newPersistence(t, connect(t), redis.PersistenceOptions{Prefix: prefix})
	b, err := redis.NewPersistence(connect(t), redis.PersistenceOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	bustest.ClaimConcurrently(t, 3000, a, b, a, b)
}

// Config.Outbox on the Redis persistence is refused by bus.New with a
// *ConfigError that says the store cannot run a handling in a database
// transaction.
func TestPersistenceRefusesOutbox(t *testing.T) {
	t.Parallel()
	p, err := redis.NewPersistence(connect(t), redis.PersistenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bus.New(bus.Config{Endpoint: "redis-outbox", Persistence: p, Outbox: bus.OutboxConfig{Enabled: true}})
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Outbox.Enabled" {
		t.Fatalf("bus.New with Outbox on a Redis persistence = %v, want a *bus.ConfigError on Outbox.Enabled", err)
	}
	if !strings.Contains(ce.Reason, "*redis.Persistence") || !strings.Contains(ce.Reason, "transaction") {
		t.Errorf("the error does not say why: %q", ce.Reason)
	}
}

// A server without an append-only file and without replicas is not
// durable; asking for replicas it does not have does not make it so.
func TestPersistenceDurableFollowsTheServer(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	cfg, err := rdb.ConfigGet(t.Context(), "appendonly").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := cfg["appendonly"] == "yes"
	if p := newPersistence(t, rdb, redis.PersistenceOptions{}); p.Durable() != want {
		t.Errorf("Durable() = %v with appendonly %q, want %v", p.Durable(), cfg["appendonly"], want)
	}
	if p := newPersistence(t, rdb, redis.PersistenceOptions{WaitReplicas: 5}); p.Durable() != want {
		t.Errorf("Durable() = %v with 5 replicas asked of a server without them, want %v", p.Durable(), want)
	}
}

// WaitReplicas on a server without replicas fails the write with a
// *ReplicationError (the row stays on the master).
func TestPersistenceWaitReplicasWithoutReplicas(t *testing.T) {
	t.Parallel()
	p := newPersistence(t, connect(t), redis.PersistenceOptions{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	err := p.StoreOutgoing(t.Context(), []bus.OutgoingMessage{{ID: "w1", Envelope: []byte("x"), DueAt: time.Now()}})
	var re *redis.ReplicationError
	if !errors.As(err, &re) || !errors.Is(err, redis.ErrNotReplicated) || re.Wanted != 1 || re.Acked != 0 {
		t.Fatalf("StoreOutgoing = %v, want a *ReplicationError (0 of 1)", err)
	}
	if _, err := p.CancelOutgoing(t.Context(), "w1"); !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("CancelOutgoing = %v, want ErrNotReplicated", err)
	}
}

// A store in one process wakes the dispatchers watching in others.
func TestPersistenceWatchDueWakesOtherProcesses(t *testing.T) {
	t.Parallel()
	prefix := drivertest.Unique("pbtest:")
	a := newPersistence(t, connect(t), redis.PersistenceOptions{Prefix: prefix})
	b, err := redis.NewPersistence(connect(t), redis.PersistenceOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	woke := make(chan time.Time, 4)
	done := make(chan error, 1)
	go func() { done <- b.WatchDue(ctx, func(due time.Time) { woke <- due }) }()
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		// The subscription may start after the first store: store until
		// a wake arrives.
		id := "watched-" + string(rune('a'+i%26))
		if err := a.StoreOutgoing(t.Context(), []bus.OutgoingMessage{{ID: id, Envelope: []byte("x"), DueAt: due}}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-woke:
			if !got.Equal(due) {
				t.Errorf("woke with %v, want %v", got, due)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("WatchDue = %v after ctx ended, want nil", err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no wake within 30 s")
		}
	}
}

func TestPersistenceScheduledBrowser(t *testing.T) {
	rdb := connect(t)
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

func TestPersistenceFailedStore(t *testing.T) {
	rdb := connect(t)
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

func TestPersistenceSagas(t *testing.T) {
	rdb := connect(t)
	bustest.SagaTests(t, func(t *testing.T) bus.SagaStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

// Setup against a server that is not there fails with an error matching
// bus.ErrStoreUnavailable, so bus.Start retries it; a wrong password does
// not.
func TestPersistenceSetupUnavailable(t *testing.T) {
	t.Parallel()
	dead := goredis.NewClient(&goredis.Options{Addr: bustest.DeadAddr(t), DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	p, err := redis.NewPersistence(dead, redis.PersistenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(t.Context()); !errors.Is(err, bus.ErrStoreUnavailable) {
		t.Errorf("Setup on a dead address = %v, want an error matching bus.ErrStoreUnavailable", err)
	}
	connect(t) // skips when the test server is absent
	wrong := goredis.NewClient(&goredis.Options{Addr: redisAddr, Username: "nobody", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = wrong.Close() })
	if p, err = redis.NewPersistence(wrong, redis.PersistenceOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(t.Context()); err == nil || errors.Is(err, bus.ErrStoreUnavailable) {
		t.Errorf("Setup with a wrong password = %v, want an error that does not match bus.ErrStoreUnavailable", err)
	}
}

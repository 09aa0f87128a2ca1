package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

// redisTestAddr is the Redis server of the tests.
var redisTestAddr = drivertest.Addr("POSTBUS_TEST_REDIS_ADDR", "127.0.0.1:6379")

// redisFixture returns a client of the test server and a key prefix of the
// test's own, whose keys are deleted when the test ends.
func redisFixture(t *testing.T) (*goredis.Client, string) {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisTestAddr, DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		bustest.SkipOutsideCI(t, "Redis at %s unreachable (set POSTBUS_TEST_REDIS_ADDR): %v", redisTestAddr, err)
	}
	prefix := drivertest.Unique("pbcli:")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := rdb.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("cleanup: keys under %s: %v", prefix, err)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

func TestRedisFlagsRetryAndProvision(t *testing.T) {
	t.Parallel()
	rdb, prefix := redisFixture(t)
	url := "redis://" + redisTestAddr + "/0"
	t.Run("retry", func(t *testing.T) {
		path, id := failedInSQLite(t, "billing")
		tr, err := redis.New(rdb, redis.Options{Prefix: prefix, Logger: drivertest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(context.Background())
		// The URL from the environment, the prefix from a flag.
		checkRetried(t, tr, map[string]string{"POSTBUS_REDIS_URL": url}, []string{"--redis-prefix", prefix}, path, "billing", id)
	})
	t.Run("provision", func(t *testing.T) {
		runProvision(t, map[string]string{"POSTBUS_REDIS_PREFIX": prefix}, append(provisionArgs("shipping"), "--redis-url", url)...)
		ctx := context.Background()
		for _, q := range []string{"shipping", "shipping-error", "shipping-deadletter"} {
			groups, err := rdb.XInfoGroups(ctx, prefix+":q:"+q).Result()
			if err != nil || len(groups) != 1 || groups[0].Name != q {
				t.Errorf("stream of %s: groups %v, %v; want the group %s", q, groups, err, q)
			}
		}
		subs, err := rdb.SMembers(ctx, prefix+":sub:orders.OrderPlaced").Result()
		if err != nil || !slices.Equal(subs, []string{"shipping"}) {
			t.Errorf("subscribers of orders.OrderPlaced: %v, %v; want [shipping]", subs, err)
		}
	})
}

// TestRedisStoreFlags: the CLI on a Redis persistence (--redis-store-url,
// POSTBUS_REDIS_STORE_PREFIX) lists and cancels scheduled messages.
func TestRedisStoreFlags(t *testing.T) {
	t.Parallel()
	rdb, prefix := redisFixture(t)
	t.Cleanup(func() { // the persistence's keys start with a hash tag
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if keys, err := rdb.Keys(ctx, "{"+prefix+":*").Result(); err == nil && len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
	})
	p, err := redis.NewPersistence(rdb, redis.PersistenceOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	env := &bus.Envelope{ID: "0190f5d6-0000-7000-8000-00000000aaaa", Type: "billing.Invoice", Kind: bus.KindCommand,
		Body: []byte(`{}`), ContentType: "application/json", Destination: "billing", DueAt: time.Now().Add(time.Hour)}
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: env.ID, Kind: env.Kind, Type: env.Type,
		Envelope: bus.MarshalEnvelope(env), DueAt: env.DueAt}}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"POSTBUS_REDIS_STORE_PREFIX": prefix}
	url := "redis://" + redisTestAddr + "/0"
	if r := runApp(t, openBackends, vars, "scheduled", "ls", "--redis-store-url", url); r.code != exitOK || !strings.Contains(r.stdout, env.ID) {
		t.Fatalf("scheduled ls on the Redis persistence: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runApp(t, openBackends, vars, "scheduled", "cancel", "--redis-store-url", url, env.ID); r.code != exitOK {
		t.Fatalf("scheduled cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, ok, err := p.GetScheduled(ctx, env.ID); err != nil || ok {
		t.Fatalf("after cancel: found %v, %v; want the message gone", ok, err)
	}
}

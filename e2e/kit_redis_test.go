package e2e_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/redis"
)

func redisAddr() string { return env("POSTBUS_TEST_REDIS_ADDR", "127.0.0.1:6379") }

// redisKit returns a namespace (a key prefix of its own) on the shared
// Redis server; every key under it is deleted at cleanup. A transport given
// an address (a proxy) dials that instead.
func redisKit(t testing.TB) *kit {
	t.Helper()
	probe := goredis.NewClient(&goredis.Options{Addr: redisAddr(), DialTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := probe.Ping(ctx).Err(); err != nil {
		_ = probe.Close()
		bustest.SkipOutsideCI(t, "Redis not reachable at %s (set POSTBUS_TEST_REDIS_ADDR): %v", redisAddr(), err)
	}
	s := suffix()
	k := &kit{
		name: "redis", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter",
	}
	prefix := "pbe2e:" + s
	t.Cleanup(func() {
		defer probe.Close()
		deleteRedisKeys(t, probe, prefix)
	})
	k.newTransport = func(t testing.TB, addr string) bus.Transport {
		t.Helper()
		a := redisAddr()
		if addr != "" {
			a = addr
		}
		rdb := goredis.NewClient(&goredis.Options{
			Addr: a, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			MaxRetries: 1,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		tr, err := redis.New(rdb, redis.Options{Prefix: prefix, Logger: quietLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}
	return k
}

func deleteRedisKeys(t testing.TB, rdb *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: scan %s: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup: delete keys under %s: %v", prefix, err)
		}
	}
}

// TestDelayedTwoInstancesRedis: the delayed-delivery case of
// TestDelayedTwoInstances over Redis Streams.
func TestDelayedTwoInstancesRedis(t *testing.T) {
	t.Parallel()
	delayedTwoInstances(t, redisKit(t))
}

// TestBrokerOutageRedis: the transport's connections to Redis go through a
// TCP proxy that is cut while scheduled messages fall due (the shared
// server keeps serving everyone else). They wait in the PostgreSQL store
// and are delivered once the proxy relays again.
func TestBrokerOutageRedis(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Listen(redisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	o := outage{
		addr:    p.Addr(),
		cut:     func(testing.TB) { p.Cut() },
		restore: func(testing.TB) { p.Restore() },
	}
	brokerOutage(t, redisKit(t), o)
}

package redis_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis redials a node that went away (the failover test kills
		// one) from a goroutine that sleeps a second between attempts and
		// ends at the first after its client closed.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// The test cluster stops after the leak check; then exit as
		// VerifyTestMain would.
		goleak.Cleanup(func(code int) {
			stopCluster()
			os.Exit(code)
		}))
}

// redisAddr is the Redis server the integration tests use.
var redisAddr = drivertest.Addr("POSTBUS_TEST_REDIS_ADDR", "127.0.0.1:6379")

// connect returns a client of the test server, closed at cleanup, or skips
// the test when the server is absent (fails under CI=true).
func connect(t testing.TB) *goredis.Client {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		bustest.SkipOutsideCI(t, "Redis at %s unreachable (set POSTBUS_TEST_REDIS_ADDR): %v", redisAddr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// namespace returns Options with a prefix of their own, and deletes every
// key under that prefix when the test ends.
func namespace(t testing.TB, rdb *goredis.Client) redis.Options {
	t.Helper()
	opts := redis.Options{Prefix: drivertest.Unique("pbtest:"), Logger: drivertest.Logger()}
	t.Cleanup(func() { deleteKeys(t, rdb, opts.Prefix) })
	return opts
}

// deleteKeys deletes every key under prefix.
func deleteKeys(t testing.TB, rdb *goredis.Client, prefix string) {
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

func mustNew(t testing.TB, rdb goredis.UniversalClient, opts redis.Options) *redis.Transport {
	t.Helper()
	tr, err := redis.New(rdb, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

// command returns a small command envelope for queue.
func command(queue string, n int) *bus.Envelope {
	return &bus.Envelope{
		ID: drivertest.ID(), Type: "redistest.Cmd", Kind: bus.KindCommand,
		Body: fmt.Appendf(nil, `{"N":%d}`, n), ContentType: "application/json",
		Destination: queue, Source: "tests", SentAt: time.Now().UTC(),
	}
}

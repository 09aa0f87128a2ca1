package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverAddr is the Redis server the integration tests use.
func serverAddr() string {
	if a := os.Getenv("POSTBUS_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// connect returns a client of the test server, closed at cleanup, or skips
// the test when the server is absent (fails under CI=true).
func connect(t testing.TB) *goredis.Client {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: serverAddr(), DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		bustest.SkipOutsideCI(t, "Redis at %s unreachable (set POSTBUS_TEST_REDIS_ADDR): %v", serverAddr(), err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// quietLogger drops logs below Error, so tests stay readable.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// uniquePrefix returns a key prefix no other test run uses.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pbtest:" + hex.EncodeToString(b[:])
}

// namespace returns Options with a prefix of their own, and deletes every
// key under that prefix when the test ends.
func namespace(t testing.TB, rdb *goredis.Client) redis.Options {
	t.Helper()
	opts := redis.Options{Prefix: uniquePrefix(), Logger: quietLogger()}
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

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// command returns a small command envelope for queue.
func command(queue string, n int) *bus.Envelope {
	return &bus.Envelope{
		ID: newID(), Type: "redistest.Cmd", Kind: bus.KindCommand,
		Body: fmt.Appendf(nil, `{"N":%d}`, n), ContentType: "application/json",
		Destination: queue, Source: "tests", SentAt: time.Now().UTC(),
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

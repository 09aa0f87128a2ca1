package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() }) // after the keys' clean-up below
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		bustest.SkipOutsideCI(t, "Redis at %s unreachable (set REDIS_ADDR): %v", addr, err)
	}
	prefix := "example-test-" + rand.Text()[:8]
	t.Cleanup(func() {
		for _, pattern := range []string{prefix + ":*", "{" + prefix + ":*"} {
			iter := rdb.Scan(context.Background(), 0, pattern, 1000).Iterator()
			for iter.Next(context.Background()) {
				if err := rdb.Del(context.Background(), iter.Val()).Err(); err != nil {
					t.Errorf("clean-up: %v", err)
				}
			}
			if err := iter.Err(); err != nil {
				t.Errorf("clean-up: %v", err)
			}
		}
	})
	var out bytes.Buffer
	if err := run(ctx, rdb, prefix, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reminder "call the customer" after at least a second: true`,
		"heartbeat 1 on a whole second: true", "heartbeat 2 on a whole second: true", "heartbeat schedule deleted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

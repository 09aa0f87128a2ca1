package main

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

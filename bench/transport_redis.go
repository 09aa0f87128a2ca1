package main

import (
	"context"
	"fmt"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/redis"
)

// redisAddr is the Redis server of the redis transport: the environment
// variable POSTBUS_BENCH_REDIS_ADDR, or the local default.
func redisAddr() string {
	if a := os.Getenv("POSTBUS_BENCH_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// redisDriver uses the run's own key prefix (bench:<run>), so runs never see
// each other's messages; the owner deletes every key under it.
func redisDriver() transportDriver {
	return transportDriver{
		shared:      true,
		serverProcs: []string{"redis-server"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
			if err := rdb.Ping(ctx).Err(); err != nil {
				_ = rdb.Close()
				return nil, nil, fmt.Errorf("connect %s: %w", redisAddr(), err)
			}
			prefix := "bench:" + run
			t, err := redis.New(rdb, redis.Options{Prefix: prefix, Logger: o.logger})
			if err != nil {
				_ = rdb.Close()
				return nil, nil, err
			}
			cleanup := func() {
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = t.Close(cctx)
				if owner {
					if err := deleteRedisKeys(cctx, rdb, prefix); err != nil {
						o.logger.Error("cannot delete the run's keys", "prefix", prefix, "error", err)
					}
				}
				_ = rdb.Close()
			}
			return t, cleanup, nil
		},
	}
}

func deleteRedisKeys(ctx context.Context, rdb *goredis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return rdb.Del(ctx, keys...).Err()
}

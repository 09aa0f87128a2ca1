package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/redis"
)

// redisPersistencePrefix is the Prefix of a run's Redis store: its keys are
// "{bench:<run>:<partition>}:…", deleted by the owner at the end.
func redisPersistencePrefix(run string) string { return "bench:" + run }

// redisPersistenceDriver stores each run under a Prefix of its own on the
// Redis of redisAddr (the one the redis transport uses). The server's CPU
// is the redis-server process's own (INFO server's process_id, read from
// /proc): the whole server's, other clients' commands included.
func redisPersistenceDriver() persistenceDriver {
	return persistenceDriver{
		shared:    true,
		storeCost: 400 * time.Microsecond,
		nodes:     true,
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error) {
			rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
			if err := rdb.Ping(ctx).Err(); err != nil {
				_ = rdb.Close()
				return nil, nil, fmt.Errorf("connect %s: %w", redisAddr(), err)
			}
			return openRedisPersistence(o, run, owner, rdb, func() {})
		},
		sessionPIDs: func(ctx context.Context, _ *options) ([]int, error) {
			return redisNodePIDs(ctx, []string{redisAddr()})
		},
	}
}

// redisClusterDriver starts a throwaway Redis Cluster of -redis-masters
// masters (no replicas) for the run, on free loopback ports, and stops it
// at the end. Its nodes exist in the owner process only, so the driver is
// not shared with -instances workers.
func redisClusterDriver() persistenceDriver {
	return persistenceDriver{
		storeCost: 400 * time.Microsecond,
		nodes:     true,
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error) {
			c, err := startBenchCluster(ctx, o.redisMasters)
			if err != nil {
				return nil, nil, err
			}
			o.redisClusterAddrs = c.addrs
			rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.addrs, DialTimeout: 2 * time.Second})
			return openRedisPersistence(o, run, owner, rdb, c.stop)
		},
		sessionPIDs: func(ctx context.Context, o *options) ([]int, error) {
			return redisNodePIDs(ctx, o.redisClusterAddrs)
		},
	}
}

// openRedisPersistence opens the run's store on rdb; its cleanup deletes the
// run's keys (owner), closes rdb, then calls stop.
func openRedisPersistence(o *options, run string, owner bool, rdb goredis.UniversalClient, stop func()) (bus.Persistence, func(), error) {
	prefix := redisPersistencePrefix(run)
	p, err := redis.NewPersistence(rdb, redis.PersistenceOptions{Prefix: prefix, Logger: o.logger})
	if err != nil {
		_ = rdb.Close()
		stop()
		return nil, nil, err
	}
	cleanup := func() {
		if owner {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := deleteRedisStoreKeys(cctx, rdb, prefix); err != nil {
				o.logger.Error("cannot delete the run's keys", "prefix", prefix, "error", err)
			}
		}
		_ = rdb.Close()
		stop()
	}
	return p, cleanup, nil
}

// deleteRedisStoreKeys deletes the keys of the store of prefix on every
// master of rdb (never FLUSHALL: the server is shared).
func deleteRedisStoreKeys(ctx context.Context, rdb goredis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				if err := delEach(ctx, c, keys); err != nil {
					return err
				}
				keys = keys[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return delEach(ctx, c, keys)
	}
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *goredis.Client:
		return del(ctx, c)
	}
	return fmt.Errorf("unexpected Redis client %T", rdb)
}

// delEach deletes keys one DEL each, pipelined: on a cluster node the keys
// of one batch may be in different slots.
func delEach(ctx context.Context, c *goredis.Client, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, k)
		}
		return nil
	})
	return err
}

// redisNodePIDs returns the process IDs of the Redis servers at addrs
// (INFO server's process_id), for their CPU from /proc.
func redisNodePIDs(ctx context.Context, addrs []string) ([]int, error) {
	pids := make([]int, 0, len(addrs))
	for _, addr := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		info, err := c.Info(ctx, "server").Result()
		_ = c.Close()
		if err != nil {
			return nil, fmt.Errorf("INFO server of %s: %w", addr, err)
		}
		pid, ok := infoField(info, "process_id")
		if !ok {
			return nil, fmt.Errorf("INFO server of %s has no process_id", addr)
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			return nil, fmt.Errorf("INFO server of %s: process_id %q: %w", addr, pid, err)
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

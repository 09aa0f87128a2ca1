package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

// newPersistence returns a Persistence on rdb under a prefix of its own,
// set up, whose keys are deleted when the test ends.
func newPersistence(t testing.TB, rdb goredis.UniversalClient, opts redis.PersistenceOptions) *redis.Persistence {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = drivertest.Unique("pbtest:")
	}
	opts.Logger = drivertest.Logger()
	p, err := redis.NewPersistence(rdb, opts)
	if err != nil {
		t.Fatalf("NewPersistence: %v", err)
	}
	t.Cleanup(func() { deletePersistenceKeys(t, rdb, opts.Prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Setup(ctx); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return p
}

// deletePersistenceKeys deletes every key of the persistence under prefix
// (on every master of a cluster).
func deletePersistenceKeys(t testing.TB, rdb goredis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del := func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *goredis.Client:
		err = del(ctx, c)
	}
	if err != nil {
		t.Errorf("cleanup: delete keys under %s: %v", prefix, err)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/redis"
)

// The stores a soak runs on (-persistence).
const (
	persistencePostgres = "postgres"
	persistenceRedis    = "redis" // the Redis persistence, on the shared Redis
)

// persistences lists every -persistence value.
var persistences = []string{persistencePostgres, persistenceRedis}

// checkPersistence refuses the options the Redis persistence cannot serve:
// the outbox, the PostgreSQL transport and the sampler need the PostgreSQL
// store, and the recurring workload runs on it alone.
func checkPersistence(c config) error {
	if !slices.Contains(persistences, c.persistence) {
		return fmt.Errorf("unknown persistence %q (want one of %v)", c.persistence, persistences)
	}
	if c.persistence == persistencePostgres {
		return nil
	}
	switch {
	case c.outbox:
		return errors.New("-outbox needs -persistence postgres")
	case c.transport == transportPostgres:
		return errors.New("-transport postgres needs -persistence postgres")
	case c.sample > 0:
		return errors.New("-sample needs -persistence postgres")
	case c.workload != workloadMessages:
		return errors.New("-workload recurring needs -persistence postgres")
	}
	return nil
}

// storeURL returns the URL of the service the store of persistence runs on.
func storeURL(persistence string) string {
	if persistence == persistenceRedis {
		return redisURL()
	}
	return postgresURL()
}

// redisStorePrefix is the Prefix of the run's Redis persistence: its keys
// are "{<prefix>:<partition>}:…".
func (n names) redisStorePrefix() string { return "soak-" + n.run + "-store" }

// redisClient connects to the Redis at rawURL under the client name name
// (CLIENT SETNAME), which the soak's connection kills select on.
func redisClient(rawURL, name string) (*goredis.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	return goredis.NewClient(&goredis.Options{
		Addr: u.Host, ClientName: name, DialTimeout: time.Second, ReadTimeout: 3 * time.Second,
		WriteTimeout: 3 * time.Second, PoolSize: 32,
	}), nil
}

// soakRedisStore is the Redis persistence counted as durable. The shared
// Redis of the soak keeps no append-only file, so the persistence reports
// itself not durable and the bus would turn delayed retries off (the
// messages asking for one would go to the error queue); the soak never
// restarts Redis, and what it checks is the store under cuts, kills and
// connection kills, with the same workload as on PostgreSQL.
type soakRedisStore struct{ *redis.Persistence }

// Durable reports true: see soakRedisStore.
func (soakRedisStore) Durable() bool { return true }

// openRedisStore opens the run's Redis persistence at rawURL, its
// connections named name, and returns it with the function that closes
// its client.
func openRedisStore(rawURL string, n names, name string, logger *slog.Logger) (soakRedisStore, func(), error) {
	rdb, err := redisClient(rawURL, name)
	if err != nil {
		return soakRedisStore{}, nil, err
	}
	store, err := redis.NewPersistence(rdb, redis.PersistenceOptions{Prefix: n.redisStorePrefix(), Logger: logger})
	if err != nil {
		_ = rdb.Close()
		return soakRedisStore{}, nil, fmt.Errorf("redis persistence: %w", err)
	}
	return soakRedisStore{store}, func() { _ = rdb.Close() }, nil
}

// killRedisClients ends, with CLIENT KILL ID, every Redis connection whose
// name starts with prefix (the workers' store connections), and returns how
// many it ended: the Redis counterpart of pg_terminate_backend.
func killRedisClients(ctx context.Context, rdb *goredis.Client, prefix string) (int, error) {
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("client list: %w", err)
	}
	killed := 0
	for _, id := range clientIDs(list, prefix) {
		n, err := rdb.ClientKillByFilter(ctx, "ID", id).Result()
		if err != nil {
			return killed, fmt.Errorf("client kill %s: %w", id, err)
		}
		killed += int(n)
	}
	return killed, nil
}

// clientIDs returns the IDs of the clients of a CLIENT LIST reply whose
// name starts with prefix.
func clientIDs(list, prefix string) []string {
	var ids []string
	for line := range strings.Lines(list) {
		var id, name string
		for field := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "id":
				id = v
			case "name":
				name = v
			}
		}
		if id != "" && strings.HasPrefix(name, prefix) {
			ids = append(ids, id)
		}
	}
	return ids
}

// redisStoreKeys returns the keys of the run's Redis persistence matching
// suffix ("*": all of them).
func redisStoreKeys(ctx context.Context, rdb *goredis.Client, n names, suffix string) ([]string, error) {
	iter := rdb.Scan(ctx, 0, "{"+n.redisStorePrefix()+":*}"+suffix, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("scan redis keys: %w", err)
	}
	return keys, nil
}

// redisStoreRows counts the scheduled messages left in the run's Redis
// persistence (the members of each partition's due-time index).
func redisStoreRows(rdb *goredis.Client, n names) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := redisStoreKeys(ctx, rdb, n, ":du")
	if err != nil {
		return "unknown: " + err.Error()
	}
	rows := int64(0)
	for _, k := range keys {
		c, err := rdb.ZCard(ctx, k).Result()
		if err != nil {
			return "unknown: " + err.Error()
		}
		rows += c
	}
	return strconv.FormatInt(rows, 10)
}

// deleteRedisStore removes every key of the run's Redis persistence.
func deleteRedisStore(ctx context.Context, rdb *goredis.Client, n names) error {
	keys, err := redisStoreKeys(ctx, rdb, n, "*")
	if err != nil {
		return err
	}
	for chunk := range slices.Chunk(keys, 500) {
		if err := rdb.Del(ctx, chunk...).Err(); err != nil {
			return fmt.Errorf("delete redis keys: %w", err)
		}
	}
	return nil
}

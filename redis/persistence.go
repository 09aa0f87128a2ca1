package redis

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var (
	_ bus.Persistence    = (*Persistence)(nil)
	_ bus.ScheduledStore = (*Persistence)(nil)
	_ bus.ClockedStore   = (*Persistence)(nil)
	_ bus.AheadClaimer   = (*Persistence)(nil)
	_ bus.DueNotifier    = (*Persistence)(nil)
	_ bus.Pinger         = (*Persistence)(nil)
)

// Defaults used for zero PersistenceOptions fields.
const (
	// DefaultPartitions is how many partitions the rows are spread over
	// when PersistenceOptions.Partitions is 0. 24 partitions split evenly
	// over 1, 2, 3, 4, 6, 8, 12 or 24 masters that share the slots evenly.
	DefaultPartitions = 24
	// DefaultWaitTimeout bounds each WAIT when PersistenceOptions.WaitReplicas
	// is set and WaitTimeout is 0.
	DefaultWaitTimeout = time.Second
	// maxPartitions bounds PersistenceOptions.Partitions: a claim reads
	// every partition.
	maxPartitions = 1024
	// storeChunk bounds the rows one store script takes.
	storeChunk = 500
)

// PersistenceOptions configure a Persistence. Every zero value means the
// documented default, so PersistenceOptions{} is a working configuration.
type PersistenceOptions struct {
	// Prefix starts the hash tag of every key: the keys of partition i are
	// "{<prefix>:<i>}:…" (see the package documentation, "Persistence").
	// Buses that share scheduled messages use the same Prefix and
	// Partitions. It must not contain '{' or '}'. Default DefaultPrefix
	// ("postbus").
	Prefix string
	// Partitions is how many partitions the rows are spread over, by a
	// hash of their ID. Each partition is one hash slot, so on Redis
	// Cluster the partitions, and the rows, spread over the masters; each
	// claim reads every partition. Changing it strands the rows stored
	// before in the partitions they were stored in: keep it for the life
	// of the data. Default DefaultPartitions (24); at most 1024.
	Partitions int
	// WaitReplicas, when positive, makes every call that stores or
	// removes data wait until that many replicas of the node acknowledged
	// the write (WAIT), and fail with an error wrapping ErrNotReplicated
	// when fewer did within WaitTimeout (the write itself stays on the
	// master): storing and cancelling scheduled messages, send now, the
	// recurring records, sagas and failed messages. Claims and their
	// settlements (delete, release, failure) do not wait: a failover that
	// undoes one makes a message claimable again or leaves it leased until
	// its lease ends, so it is delivered at least once and never lost, and
	// a partition whose master lost its replicas stays deliverable.
	// Default 0: a call returns once the master applied it.
	WaitReplicas int
	// WaitTimeout bounds each WAIT. Default DefaultWaitTimeout (1s).
	WaitTimeout time.Duration
	// Logger receives the store's warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o PersistenceOptions) withDefaults() PersistenceOptions {
	driver.Default(&o.Prefix, DefaultPrefix)
	driver.Default(&o.Partitions, DefaultPartitions)
	driver.Default(&o.WaitTimeout, DefaultWaitTimeout)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o PersistenceOptions) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return &OptionsError{Field: "Prefix", Reason: fmt.Sprintf("%q contains '{' or '}', which would move the hash tag", o.Prefix)}
	}
	if o.Partitions < 1 || o.Partitions > maxPartitions {
		return &OptionsError{Field: "Partitions", Reason: fmt.Sprintf("%d is not between 1 and %d", o.Partitions, maxPartitions)}
	}
	p := driver.First(
		driver.NotNegative("WaitReplicas", o.WaitReplicas),
		driver.NotNegative("WaitTimeout", o.WaitTimeout),
	)
	return driver.Invalid[errorFamily](p)
}

// Persistence keeps scheduled messages in Redis, on one server or spread
// over a Redis Cluster. It implements bus.Persistence, bus.ScheduledStore,
// bus.AheadClaimer, bus.ClockedStore and bus.DueNotifier. It is safe for
// concurrent use, and several processes may share its keys. It keeps no
// outbox: a handler's business data is not in Redis, so Config.Outbox is
// refused with it.
type Persistence struct {
	client  goredis.UniversalClient
	opts    PersistenceOptions
	tags    []string // the key prefix of each partition: "{tag}"
	channel string   // the due channel (WatchDue)
	next    atomic.Uint64
	durable atomic.Bool
	// afterCommit, when set (by tests), runs between the commit of an
	// advance and the storing of its rows; an error stops the advance
	// there, as a writer that died would.
	afterCommit func() error
}

// NewPersistence returns a Persistence on client. The caller owns the
// client (its pool, timeouts and retries apply) and closes it. Call Setup
// (bus.Start does, unless Config.SkipSetup) to load the scripts and read
// the server's durability.
func NewPersistence(client goredis.UniversalClient, opts PersistenceOptions) (*Persistence, error) {
	if client == nil {
		return nil, &OptionsError{Field: "client", Reason: "must not be nil"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &Persistence{client: client, opts: opts, tags: partitionTags(opts.Prefix, opts.Partitions), channel: opts.Prefix + ":due"}
	p.next.Store(uint64(time.Now().UnixNano()))
	return p, nil
}

// Durable reports whether Setup found the server keeping its data across
// a restart or the loss of a node: append-only file on every master, or
// WaitReplicas set and that many replicas attached to every master. It is
// false before Setup.
func (p *Persistence) Durable() bool { return p.durable.Load() }

// Setup loads the scripts on every master and reads the server's
// persistence settings (see Durable). Nothing needs creating: keys appear
// when rows are stored. An error of a server that cannot be reached for
// now (a refused or lost connection, a timeout, LOADING, CLUSTERDOWN, …)
// matches bus.ErrStoreUnavailable, so bus.Start tries again; others, such
// as a wrong password, do not.
func (p *Persistence) Setup(ctx context.Context) error {
	for _, s := range storeScripts {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return unavailable(fmt.Errorf("redis: setup: load scripts: %w", err))
		}
	}
	durable, err := p.readDurability(ctx)
	if err != nil {
		return unavailable(fmt.Errorf("redis: setup: %w", err))
	}
	p.durable.Store(durable)
	return nil
}

// String describes the store for logs and errors: "redis <prefix>" and
// the partitions.
func (p *Persistence) String() string {
	return fmt.Sprintf("redis %s (%d partitions)", p.opts.Prefix, len(p.tags))
}

// Ping returns nil when the server (every master of a cluster) answers.
func (p *Persistence) Ping(ctx context.Context) error {
	if c, ok := p.client.(*goredis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: ping %s: %w", c.Options().Addr, err)
			}
			return nil
		})
	}
	if err := p.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// StoreNow returns the server's time (on the node of the first partition).
func (p *Persistence) StoreNow(ctx context.Context) (time.Time, error) {
	s, err := timeScript.Run(ctx, p.client, []string{p.tags[0]}).Text()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: server time: %w", err)
	}
	us, err := parseMicros(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: server time: %w", err)
	}
	return us, nil
}

// partitionOf returns the partition of a row ID: FNV-1a modulo the count.
func (p *Persistence) partitionOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(len(p.tags)))
}

// zset returns the sorted-set key of transport in partition i.
func (p *Persistence) zset(i int, transport string) string { return p.tags[i] + ":z:" + transport }

// claimKeys returns the sorted sets a claim for transport reads in
// partition i: its own and that of rows without a transport.
func (p *Persistence) claimKeys(i int, transport string) []string {
	return []string{p.zset(i, transport), p.zset(i, "")}
}

// Package redis is the Redis Streams transport of Postbus and a Redis
// persistence (see "Persistence" below), built on
// github.com/redis/go-redis/v9.
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	t, err := redis.New(rdb, redis.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t})
//
// The caller owns the client (any goredis.UniversalClient): its pool,
// timeouts and retries apply, and closing it is the caller's job.
//
// # Topology
//
// Every key starts with Options.Prefix (default "postbus"):
//
//	postbus:q:<queue>    a stream per queue: commands, replies and events
//	postbus:sub:<type>   a set per event type: the queues subscribed to it
//
// Each queue's stream has one consumer group, named after the queue (its
// endpoint), created at the start of the stream so messages sent before it
// existed are kept. Every Receive call is a consumer of its own in that
// group ("<host>-<pid>-<random>"), so the processes of an endpoint compete
// for its messages. Provision creates the streams and groups of the
// topology and adds the endpoint's queue to the set of each event type it
// subscribes to. Publish runs one script that reads the type's set and adds
// the event to each subscriber's stream, so either every subscriber gets it
// or none does; an event nobody subscribes to goes nowhere.
//
// # Acknowledgement and redelivery
//
// Receive reads with XREADGROUP (blocking up to Options.Block), up to
// Concurrency + Prefetch messages in hand. A message whose handler returned
// nil is acknowledged and deleted (XACK and XDEL, batched), so a stream
// holds only messages not yet handled. A message whose handler failed is
// handed back at once: one script adds it again at the end of the stream
// (same envelope, a requeue count in field "r") and acknowledges and
// deletes the original, so it is delivered again to any consumer of the
// queue (bustest.Features.NativeRedelivery). The bus's own immediate
// retries run in process before that; its delayed retries go through the
// store. Redelivered messages go to the back of the queue: the transport
// keeps no order.
//
// # Leases and consumer death
//
// A message read by a consumer is in its pending list. While it is in hand
// the consumer renews its claim every Lease/3 (XCLAIM JUSTID, which resets
// the idle time). Every ClaimInterval each consumer takes over messages
// idle for longer than Options.Lease (XAUTOCLAIM): those of a process that
// died or was cut off. A consumer that finds, when renewing, that another
// took one of its messages over cancels that delivery's ctx, and does not
// hand the message back if its handler then fails. Delivery is therefore at
// least once: a consumer cut off for longer than the lease may finish a
// message another consumer also handles. IDs are kept, so receivers can
// de-duplicate.
//
// # Durability
//
// A Send returns once Redis stored the message in memory. Whether it
// survives a Redis restart depends on the server's persistence (AOF with
// appendfsync always or everysec, RDB snapshots): without persistence a
// restart loses every queued message and every subscription. Replication
// is asynchronous, so a failover can lose the last writes. Pair the
// transport with a durable persistence for delayed messages and retries,
// and configure Redis persistence for queued ones.
//
// # Limits
//
// Streams are bounded only by memory unless Options.MaxLen is set; a cap
// drops the oldest entries, handled or not. On Redis Cluster all of a bus's
// keys must share a slot, which a hash-tagged prefix ("{postbus}") gives.
//
// # Persistence
//
// NewPersistence returns a store of scheduled messages, recurring
// schedules, saga instances and failed messages in Redis, on one server or
// a Redis Cluster:
//
//	store, err := redis.NewPersistence(rdb, redis.PersistenceOptions{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t, Persistence: store})
//
// Rows are hashed by ID (schedules and sagas by name) over
// PersistenceOptions.Partitions partitions; every key of a partition
// starts with the hash tag "{<prefix>:<i>}", so a partition is one slot and
// every store call is one Lua script on one partition, atomic on its node.
// Due, lease and retry times are compared on the node's clock (TIME in the
// scripts). A claim reads every partition's earliest claimable rows in one
// pipeline and leases the earliest of them all in a second, so no
// partition starves. Setup loads the scripts and reads the server's
// durability: Durable reports whether every master keeps an append-only
// file, or has the replicas PersistenceOptions.WaitReplicas asks every
// write to wait for (WAIT). There is no outbox: a handler's data is not in
// Redis, and bus.New refuses Config.Outbox with this persistence.
// docs/persistence/redis.md has the data layout, the durability settings
// and what each loses, and the cluster setup.
package redis

// Package postgres is the durable PostgreSQL persistence of Postbus: a
// scheduled-message store (bus.ScheduledStore) with claims that lock rows and
// cross-instance wake-up (bus.DueNotifier), and the transactional outbox
// and inbox (bus.OutboxStore) and saga instances (bus.SagaStore), on
// github.com/jackc/pgx/v5.
// and inbox (bus.OutboxStore), on github.com/jackc/pgx/v5. It also has a
// PostgreSQL transport (NewTransport; see Transport below).
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	store, err := postgres.New(pool, postgres.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Persistence: store})
//	err = b.Start(ctx) // runs store.Setup unless Config.SkipSetup
//
// # Schema
//
// One table, by default public.outgoing_messages (Options.Schema,
// Options.Table), with a (transport, available_at, id) index. Setup creates
// both if missing, and migrates a table made by an earlier version (it adds
// the lease_token and transport columns, creates that index and drops the
// (available_at, id) index it replaces); it is idempotent and takes a
// transaction-scoped advisory lock, so a fleet starting at once is safe.
// Migrations and MigrationsFor return the same DDL for teams that run their
// own migration tool. Names are checked (*NameError) and always quoted.
//
// available_at is the single "next claimable" time: it starts as the due
// time and is pushed forward by each failure (the retry time); a claim does
// not change it. Claiming and finding the next due time are therefore range
// reads of one index, whatever the size of the backlog. The columns
// lease_until, lease_token and prior_available_at, which the leasing claims
// of v0.3.0 and earlier wrote, are no longer written; Setup keeps them so
// that processes of both versions can share a table during a rolling
// upgrade (a row leased by a v0.3.0 process has available_at = the end of
// its lease, so this version takes it only after that lease).
//
// The envelope is stored as bytea: it is already bus.MarshalEnvelope's
// compact binary encoding, which jsonb could only hold re-encoded as text
// (base64 body, parsed and validated on every insert) for no query this
// store ever makes inside it.
//
// # Transports
//
// Each row keeps, in the transport column, the identity of the transport it
// was scheduled through (bus.TransportIdentity: a broker and namespace). A
// dispatcher claims only rows of its own transport's identity, and rows
// with an empty transport, which were stored before rows carried one. So
// services that share a database, and even a table, but not a broker never
// send each other's messages, while a send-only bus and a dispatching bus on
// the same broker share their rows.
//
// # Claims lock rows; the database clock
//
// ClaimDueOutgoing takes a connection of the pool, begins a transaction and,
// in the same round trip, locks the earliest claimable rows of the transport
// with SELECT ... FOR UPDATE SKIP LOCKED (one ordered index scan for the
// transport, then one for the empty transport to fill the batch), writing
// nothing to them. Concurrent dispatchers in any number of processes skip
// each other's rows instead of waiting. The transaction stays open while the
// rows are handed over: delete, release and failure recording name each row
// with the random 128-bit token of its claim, run in that claim's
// transaction (a DELETE, nothing, an UPDATE), and the one that leaves no row
// of the claim unsettled commits it, in the same round trip. So a row is
// inserted, locked and deleted, with no new row version or index entry for
// its claim. They return how many rows they settled; a token this store does
// not hold open settles nothing.
//
// When a process dies its connections close, and the server frees its rows
// at once: another dispatcher takes them at its next poll. A process that
// freezes or loses its network leaves its transaction idle, and the server
// ends it after the claim's window and lease (and a grace of a quarter of the
// lease, at most a second: idle_in_transaction_session_timeout, set for the
// claim's transaction); the process cannot commit when it wakes, and its
// settlements settle nothing. The lease is therefore the bound on a frozen
// process's rows, and the time the dispatcher has to hand rows over and
// settle them; LeaseUntil is the server's now() + the lease.
//
// A running process keeps its open claims alive (a "SELECT 1" on a claim
// idle for a third of that time), so rows it handed over and has not yet
// deleted stay locked while its settlements are late, rather than going to
// another dispatcher; a claim is rolled back when it is twice its window and
// lease old.
//
// Each open claim holds a connection of its own, beside the pool (with its
// configuration), so that a hand-over needing a connection of the pool
// never waits for one a claim holds; a Persistence keeps at most half the
// pool's MaxConns in open claims (at least two). A claim beyond joins the
// youngest open claim when it began under a second ago, or waits up to
// 100 ms for one to end, then returns no row. RollbackClaims rolls back
// every open claim at once and closes the claims' connections.
//
// CancelOutgoing, SendNow and the recurring schedules' cancellations skip a
// row a claim holds (FOR UPDATE SKIP LOCKED) rather than wait for it: it is
// being delivered, and they report it so. They skip a row leased by a
// v0.3.0 process whose lease runs alike.
//
// Due and retry times are compared with the server's clock, not the
// caller's, and relative times are added to it in SQL: a row stored with a
// Delay (bus.DeliverAfter, delayed retries) is due at now() + Delay, a
// failure with a RetryAfter is retried at the statement's time +
// RetryAfter, and a claim's lease is timed by the server. Instances whose
// clocks disagree with the database therefore never dispatch a message
// early. StoreNow returns the server's now() (bus.ClockedStore). In a claim,
// now() is the start of the claim's transaction, begun in the same round
// trip; it is stable, so "available_at <= now()" is an index condition
// (clock_timestamp() is volatile and is not).
//
// # Storing
//
// StoreOutgoing is idempotent by ID (ON CONFLICT DO NOTHING), so a retried
// send never schedules twice. The rows of concurrent calls are grouped: a
// call that finds no insert running inserts at once, alone; calls arriving
// while Options.MaxConcurrentInserts inserts are in flight queue and go
// together, as one multi-row INSERT over unnest arrays, when one finishes.
// Delete, release and failure recording are one statement per claim in a
// call (none for a release that does not end its claim).
//
// # Notifications
//
// The INSERT also calls pg_notify on Channel with the earliest due time of
// the new rows (Unix microseconds), in the same transaction, so listeners
// hear only of committed rows. WatchDue keeps one pooled connection in
// LISTEN and wakes the dispatcher, so a message scheduled a few milliseconds
// ahead by one instance is dispatched on time by another, without waiting
// for its poll. Behind PgBouncer in transaction pooling mode LISTEN cannot
// work: set Options.DisableNotify and dispatchers fall back to polling.
//
// # Transactional outbox and inbox
//
// A Persistence is a bus.OutboxStore. With bus.Config.Outbox enabled, each
// handling runs in one transaction on a pooled connection (BeginHandling):
// first its row in the inbox table (Options.InboxTable, default
// <table>_inbox, keyed by endpoint and message ID), then the handler's
// writes through Tx(ctx), then the messages it sent, with their pg_notify,
// then commit. A message the endpoint already handled is skipped; a second
// handling of a message still in progress waits on the inbox row's key.
// Outside handlers, WithTx(ctx, tx) makes Send and Publish store in the
// caller's own transaction (StoreOutgoingInCallerTx); a transaction on
// another database is refused with an *OtherDatabaseError. PurgeInbox
// deletes expired inbox rows in batches (the dispatcher calls it). A
// handling holds its connection until it ends: size the pool above the
// bus's Concurrency plus the dispatcher's and the handlers' other needs.
// See docs/guide/outbox.md.
//
// # Sagas
//
// A Persistence is a bus.SagaStore: saga instances are rows of the saga
// table (Options.SagaTable, default <table>_sagas), keyed by (saga,
// correlation), with the state as json (the exact bytes the saga stored,
// readable with ->> and ->), the pending timeouts as text[] and a version.
// An insert is ON CONFLICT DO NOTHING, and updates and deletes name the
// version they read: no affected row is an error wrapping
// bus.ErrSagaConflict, and never aborts the transaction the statement ran
// in. When ctx carries the outbox handling's transaction (Tx), or a
// caller's (WithTx), the saga statements run in it, so the state commits
// with the handler's writes and the messages it sent.
//
// # Operations
//
// Persistence implements bus.ScheduledBrowser and bus.FailedStore, which
// the postbus CLI and the console use. Scheduled rows carry their message
// type (message_type); the (due_at, id) and (message_type, due_at, id)
// indexes serve listings, paged by key, and the due-time histogram. The
// backlog count is exact up to 100,000 rows and the catalog's estimate
// beyond; the overdue count reads the claim index, capped at
// bus.OverdueCap; a histogram whose window holds more than about 100,000
// rows is estimated from the planner's statistics on due_at. Failed
// messages live in <Table>_failed, indexed by (last_failed, id) and by
// (failure_group, last_failed, id) INCLUDE (first_failed), so that groups
// are counted from the index alone. No operator query scans a table.
//
// # Transport
//
// NewTransport returns a bus.Transport on the same kind of pool: queues are
// rows of one table, so a team running only PostgreSQL has a complete bus.
//
//	tr, err := postgres.NewTransport(pool, postgres.TransportOptions{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr, Persistence: store,
//		Outbox: bus.OutboxConfig{Enabled: true}})
//
// Provision creates two tables in TransportOptions.Schema: <prefix>_messages
// holds the messages of every queue (a queue column tells them apart; one
// (queue, available_at, seq) index serves every claim), and
// <prefix>_subscriptions says which queue receives which event type, so
// Publish is one INSERT ... SELECT that writes one row per subscribing
// queue. One table with a queue column was chosen over a table per queue:
// measured with pgbench on this design's insert, claim and delete (8
// clients, 8 queues), the two were within 6% of each other (913 and 966
// transactions/s, fsync-bound), and one table needs no DDL when a queue
// appears, one claim statement and one notification channel.
//
// Receive claims rows with FOR UPDATE SKIP LOCKED under a lease
// (TransportOptions.Lease): competing consumers in any number of processes
// skip each other's rows. It holds up to twice its Concurrency, extends the
// leases every Lease/3 while handlers run, and cancels a delivery's ctx
// (cause ErrLeaseLost) when another consumer took the row. A handled
// message's row is deleted; a failed one is made available again at once
// (native redelivery).
//
// A consumer that dies gives its rows back within about a second, not
// after the lease. While it receives, a Transport holds a session-level
// advisory lock on a random owner key, on a connection of its own taken out
// of the pool, and its claims write that key into lease_owner (a column in
// no index, added by Provision to tables of v0.3.0). The server releases a
// session lock the moment the session ends, which for a killed process is
// when the kernel closes its sockets. About once a second each Receive
// makes available the rows of its queue still leased (available_at >
// now(), a range of the claim index) whose owner is another and whose lock
// nobody holds (pg_locks, read only when such rows exist). A frozen
// process (SIGSTOP) or one the network cut off keeps its session as far as
// the server knows, so its rows wait out the lease as before, and once
// awake its acknowledgements name a lease token that is no longer the
// row's. When the lock connection itself fails while the process lives (a
// terminated backend, a ping unanswered for a lease), the deliveries
// claimed under that key are cancelled with ErrLeaseLost and a new key is
// locked on a new connection. A lease token per claim rather than only the
// owner key keeps every statement exact whatever the owner's state, and
// the lock rather than a heartbeat table costs no write to stay alive.
// TransportOptions.DisableOwnerLock turns it off (PgBouncer in transaction
// pooling mode, where a session lock does not follow the client).
//
// Transport sends and publishes (those that do not join an outbox
// handling's or a caller's transaction: WithTx stores rows in that
// transaction, and the dispatcher hands them over after the commit) are
// committed in groups (group commit): up to four commits run at once,
// and the rows of the calls that arrive while they all run share the next
// transaction, up to MaxSendBatch rows, taken as soon as one of them ends,
// with no timer. Each group is one INSERT statement. Each caller returns
// when its own row is committed, with its own error: a row the database
// refuses fails only its caller. Then, with its callers released, the
// group notifies the table's channel once for each queue it inserted
// into, with the queue as the payload, in a statement of its own
// (PostgreSQL serializes notifying commits with their WAL flush). A caller
// whose ctx ends returns at once; its message may still be sent when its
// commit had begun. Close waits for the sends it accepted. An idle
// Receive wakes on the notification, or after PollInterval when
// notifications are off or were lost. Sends commit synchronously; claims,
// lease extensions, releases, acknowledgements and notifications commit
// without waiting for the WAL flush, since a database crash that undoes
// one only delivers a message again (or later).
//
// The error and dead-letter queues are queues like others: their rows
// stay in <prefix>_messages, with queue set to their name, until consumed,
// and can be read with SQL (headers is jsonb; the failure reason is
// headers->>'postbus.failure.reason'). See docs/transports/postgres.md.
//
// # Receive, handle and send in one transaction
//
// With bus.Config.Outbox enabled on a Persistence of the same database as
// the Transport, BeginHandling finds the transport's delivery in the
// handling's context and deletes the message's row inside the handling's
// transaction. The acknowledgement, the inbox row, the handler's writes
// and the messages it sent then commit together, or not at all: a process
// killed mid-handling leaves nothing behind and the message is delivered
// again (within about a second; after the lease with DisableOwnerLock), and one killed after the commit never sees
// the message again. The inbox still catches a message the dispatcher sent
// twice (a crash between its send and its delete), so database effects
// happen once per message ID.
//
// # Lifecycle and errors
//
// The caller owns the pool and closes it after stopping the buses. A
// Persistence keeps no goroutine or connection between calls (WatchDue holds
// one for as long as it runs), so it has no Close. Every method honours its
// context and returns errors wrapped with a "postgres: " prefix; the bus's
// dispatcher logs them, backs off and retries, so a database restart delays
// messages but loses none.
package postgres

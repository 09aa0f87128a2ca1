// Package sqlite is a durable Postbus persistence in a single SQLite file:
// the embedded store for single-machine deployments, with no server to run.
// It implements bus.Persistence, bus.ScheduledStore, bus.ClockedStore,
// bus.DueNotifier and bus.OutboxStore, so messages sent with bus.DeliverAfter or bus.DeliverAt
// survive a restart of the process.
// It uses modernc.org/sqlite, a pure Go build of SQLite: no cgo.
//
//	p, err := sqlite.Open("postbus.db", sqlite.Options{})
//	if err != nil { … }
//	defer p.Close()
//	b, err := bus.New(bus.Config{Endpoint: "billing", Persistence: p})
//
// # Setup
//
// Open opens or creates the file, switches it to WAL mode, sets the busy
// timeout and synchronous=NORMAL, but creates no table. Setup creates the
// table (Options.Table, default "outgoing_messages") and its index, and is
// idempotent; bus.Start calls it. Call it yourself when you use the store
// without a bus. The schema:
//
//	outgoing_messages(id TEXT PRIMARY KEY, kind INTEGER, envelope BLOB,
//	    due_at INTEGER, available_at INTEGER, lease_until INTEGER,
//	    failures INTEGER, last_error TEXT, created_at INTEGER,
//	    lease_token TEXT, transport TEXT NOT NULL DEFAULT '',
//	    message_type TEXT NOT NULL DEFAULT '', prior_available_at INTEGER)
//	index outgoing_messages_claim_idx (transport, available_at, id)
//
// Times are INTEGER Unix nanoseconds. The envelope is bus.MarshalEnvelope's
// bytes. available_at is when the row next becomes claimable: it starts at
// due_at and each claim (the lease) and each failure (the retry time) pushes
// it forward; a claim keeps the value it replaces in prior_available_at,
// and a release puts the row back there, so a release never cuts a
// failure's backoff short. transport is the identity of the transport the row was
// scheduled through (bus.TransportIdentity). So one index answers every
// claim and NextDueOutgoing: an ordered range of the dispatcher's transport
// and one of transport ”, merged.
//
// A table created by an earlier version lacks lease_token, transport,
// message_type or prior_available_at: Setup adds them (it reads PRAGMA table_info first, inside its write
// transaction, so running it again or from several processes at once adds
// nothing twice), creates the claim index and drops the earlier
// (available_at, id) index. Rows stored before have transport ” and are
// claimed by the dispatcher of any transport.
//
// # Lease tokens
//
// A claim gives the rows it leases a new lease_token: 128 random bits in
// hex, different for every claim, in any process. Delete, release and
// record-failure match id and lease_token, and return the number of rows
// they changed, so a dispatcher whose lease lapsed and whose row another
// claim took, or that was cancelled and stored again, changes nothing.
// CancelOutgoing removes a row only when no lease is running on it (no
// token, or lease_until at or before the store's now); a leased row is
// being delivered, and cancel returns false.
//
// # Transports
//
// A claim and NextDueOutgoing consider only rows whose transport is the
// dispatcher's own or ”. Services whose buses share a file but not a
// broker never send each other's rows; a send-only bus and a dispatching
// bus on the same broker share theirs.
//
// # The store's clock
//
// The store is a bus.ClockedStore. Its clock is the wall clock of the
// machine the file is on, read with time.Now in the process that runs the
// statement (SQLite itself reads that same clock, at millisecond
// precision only). Every process on the file runs on that machine, so
// they all read the same clock. Due times of relative delays
// (OutgoingMessage.Delay, from bus.DeliverAfter and delayed retries), the
// retry time of a failure (OutgoingFailure.RetryAfter), the lease of a
// claim and the check of a cancel all use it; the now argument of
// ClaimDueOutgoing is not used. bus.DeliverAt stays absolute: its DueAt is
// stored as given. A consequence: a bus whose Config.Clock is a fake clock
// does not move this store's time; tests that drive delays with a fake
// clock use bus.NewMemoryPersistence.
//
// # Claims
//
// A claim runs in one write transaction (BEGIN IMMEDIATE): it reads the
// clock once it holds the write lock, selects the due rows ordered by
// (available_at, id), leases them, and commits. SQLite admits one writer
// per file at a time, so concurrent claimers, in this process or another,
// never share a row.
//
// Within a process the database/sql pool holds one connection: writers
// queue in Go instead of spinning on SQLITE_BUSY. Stores are batched in one
// transaction with multi-row INSERT OR IGNORE statements (a stored ID keeps
// its row); deletes and releases of a claim are a single statement.
//
// # Several processes
//
// Several processes on one machine may open the same file and dispatch
// from it at once: SQLite's file locks serialize their writes and each
// claim is one transaction, so each row is dispatched once
// (TestMultiProcessClaims checks it with separate OS processes). A process
// that finds the file locked waits up to Options.BusyTimeout, then fails
// with SQLITE_BUSY ("database is locked"; the dispatcher retries with
// backoff). WatchDue (bus.DueNotifier) reads PRAGMA data_version every
// Options.WatchInterval (100 ms): when another process has committed, it
// wakes this process's dispatcher with the next due time of the transports
// it claims for, so a row another process stores is not held back until
// the next poll. WAL needs shared memory between the processes, so do not
// put the file on a network file system.
//
// # Transactional outbox and inbox
//
// With bus.Config.Outbox.Enabled, each handling runs in one write
// transaction (BEGIN IMMEDIATE) that BeginHandling opens: it inserts the
// inbox row (endpoint, message_id) into <table>_inbox with INSERT OR
// IGNORE (no row inserted: the endpoint handled the message already, and
// the handler is skipped), then the handler writes through sqlite.Tx(ctx),
// then the messages it sent are inserted as rows of the scheduled table
// (immediate ones due at once), then it commits. The bus wakes its own
// dispatcher after the commit; other processes on the file wake through
// WatchDue. Setup creates the inbox table and its index on handled_at;
// PurgeInbox, which the dispatcher calls, deletes rows older than
// bus.OutboxConfig.Retention in batches.
//
//	<table>_inbox(endpoint TEXT, message_id TEXT, handled_at INTEGER,
//	    PRIMARY KEY (endpoint, message_id))
//	index <table>_inbox_handled_idx (handled_at)
//
// The store's pool holds one connection, and a handling holds it from
// BeginHandling to its commit: the handlings of a process, its dispatcher
// and every other call on the store run one after another, and in other
// processes they wait for the file's write lock (Options.BusyTimeout). So:
// inside a handler use the transaction sqlite.Tx returns, never p.DB()
// (that statement waits for the connection the handling holds, until ctx
// ends), and do not make a handler wait for anything that needs another
// handling or the dispatcher of the same store to progress. Keep handlers
// short: their duration is the throughput limit of the file.
//
// Outside handlers, sqlite.WithTx(ctx, tx) with a transaction begun on the
// store's own handle, p.DB().BeginTx, makes bus.Send and bus.Publish store
// the message in tx: it goes out after tx commits, never if it rolls back.
// That transaction also holds the single connection until it ends. The
// store first asks through tx which file it is on: a finished transaction,
// or one on another database, fails with a *TxError (ErrUnusableTx) and
// nothing is stored. The commit of tx does not change PRAGMA data_version
// for the store's own connection, so the store flags the row, and WatchDue
// wakes this process's dispatcher at its next tick.
//
// # Operations
//
// Persistence implements bus.ScheduledBrowser and bus.FailedStore, which
// the postbus CLI and the console use. Scheduled rows carry their message
// type; the (due_at, id) and (message_type, due_at, id) indexes serve
// listings and the due-time histogram. The backlog count is exact up to
// 100,000 rows and estimated from the rowid range beyond. Failed messages
// live in <Table>_failed, indexed by (last_failed, id) and by
// (failure_group, last_failed, id, first_failed), which groups read alone.
//
// # Sagas
//
// A Persistence is a bus.SagaStore. Setup creates the saga table, one row
// per instance:
//
//	<table>_sagas(saga TEXT, correlation TEXT, id TEXT, state TEXT,
//	    timeouts TEXT, version INTEGER, created_at INTEGER, updated_at INTEGER,
//	    PRIMARY KEY (saga, correlation))
//
// state holds the saga's JSON bytes exactly, as TEXT, so json_extract reads
// it; timeouts is a JSON array of message IDs. An insert is ON CONFLICT DO
// NOTHING, and updates and deletes name the version they read: no changed
// row is an error wrapping bus.ErrSagaConflict, and the transaction stays
// usable. When ctx carries a transaction (Tx: the handling's, or the
// caller's from WithTx) the saga statements run in it, so the state
// commits with the handler's writes and the messages it sent; inside a
// handler they must, as the handling holds the store's only connection.
//
// # Durability
//
// With WAL and synchronous=NORMAL a committed store survives the process
// crashing; a power loss may lose the last commits but never corrupts the
// file. Durable reports true (false for the path ":memory:").
package sqlite

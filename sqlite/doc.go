// Package sqlite is a durable Postbus persistence in a single SQLite file:
// the embedded store for single-machine deployments, with no server to run.
// It implements bus.Persistence, bus.ScheduledStore and bus.DueNotifier, so
// messages sent with bus.DeliverAfter or bus.DeliverAt survive a restart of
// the process.
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
//	    failures INTEGER, last_error TEXT, created_at INTEGER)
//	index (available_at, id)
//
// Times are INTEGER Unix nanoseconds. The envelope is bus.MarshalEnvelope's
// bytes. available_at is when the row next becomes claimable: it starts at
// due_at and each claim (the lease) and each failure (the retry time) pushes
// it forward, so one index answers every claim and NextDueOutgoing.
//
// # Claims and clocks
//
// A claim runs in one write transaction (BEGIN IMMEDIATE): it selects the
// due rows ordered by (available_at, id), leases them, and commits. SQLite
// admits one writer per file at a time, so concurrent claimers, in this
// process or another, never share a row. Times compare against the now the
// caller passes: SQLite has no clock apart from the process's own, so keep
// the clocks of processes sharing a file in step (they run on one machine,
// so they share its clock).
//
// Within a process the database/sql pool holds one connection: writers
// queue in Go instead of spinning on SQLITE_BUSY. Stores are batched in one
// transaction with multi-row INSERT OR IGNORE statements (a stored ID keeps
// its row); deletes and releases of a batch are a single statement.
//
// # Several processes
//
// Several processes on one machine may open the same file and dispatch from
// it at once: SQLite's file locks serialize their writes and each claim is
// one transaction, so each row is dispatched once (TestMultiProcessClaims
// checks it with separate OS processes). A process that finds the file
// locked waits up to Options.BusyTimeout, then fails with SQLITE_BUSY
// ("database is locked"; the dispatcher retries with backoff). WatchDue (bus.DueNotifier) reads
// PRAGMA data_version every Options.WatchInterval (100 ms): when another
// process has committed, it wakes this process's dispatcher with the next
// due time, so a row another process stores is not held back until the next
// poll. WAL needs shared memory between the processes, so do not put the
// file on a network file system.
//
// # Durability
//
// With WAL and synchronous=NORMAL a committed store survives the process
// crashing; a power loss may lose the last commits but never corrupts the
// file. Durable reports true (false for the path ":memory:").
package sqlite

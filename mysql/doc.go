// Package mysql is the MySQL and MariaDB persistence of Postbus, on
// database/sql and github.com/go-sql-driver/mysql: scheduled messages for
// delayed delivery, the transactional outbox and inbox, sagas, recurring
// schedules and the failed-message store, in InnoDB tables of the
// database the caller's *sql.DB connects to.
//
// It needs FOR UPDATE SKIP LOCKED: MariaDB 10.6 or later, or MySQL 8.0
// or later.
//
//	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
//	store, err := mysql.New(db, mysql.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t, Persistence: store})
//
// # Clock and times
//
// Due, lease and retry times are DATETIME(6) columns in UTC, compared and
// computed on the server's UTC_TIMESTAMP(6) (bus.ClockedStore), so a
// client whose clock lags cannot make a message early, and the session
// time zone, the DSN's parseTime and loc never change a time: times travel
// as microseconds since the epoch.
//
// # Claims
//
// A claim locks its rows instead of leasing them: it reads the earliest
// claimable rows without locks, then locks them by primary key with
// SELECT … FOR UPDATE SKIP LOCKED in a READ COMMITTED transaction that
// stays open, and writes nothing. Concurrent claimers in any process skip
// each other's rows instead of waiting. The dispatcher's deletes, releases
// and failures run in the claim's transaction, which commits when the
// claim's last row is settled. A process that dies loses its connection:
// the server rolls its claims back at once and another process takes the
// rows on its next poll, about a second after the crash. A process that
// freezes leaves its claims idle: the server ends each once it has been
// idle for the look-ahead window plus the lease, rounded up to whole
// seconds (MariaDB's idle_transaction_timeout; on MySQL the session's
// wait_timeout), so the rows wait at most that long. A claim holds one
// connection of the pool until it ends; at most half the pool's
// MaxOpenConnections are held so. Cancels, SendNow and a recurring
// schedule's cancellations never wait for a held row: they report it as
// being delivered. Close rolls back the claims still open.
//
// The columns lease_until, lease_token and prior_available_at are no
// longer written but kept, so that processes of the earlier versions,
// which leased claimed rows, can share the tables during a rolling
// upgrade: a row they leased is claimed by this version only after its
// lease.
//
// # Wake-up across processes
//
// MySQL has no LISTEN/NOTIFY. WatchDue polls the next due time of the
// transports this store's dispatchers claim for every
// Options.WatchInterval (100 ms by default), one indexed MIN each; a row
// stored by another process wakes this dispatcher within about that
// interval. Rows stored by this process wake its dispatcher at once.
//
// # Outbox
//
// With bus.Config.Outbox.Enabled, each handling runs in one transaction
// (Tx returns it in a handler); WithTx puts a caller's own transaction in
// a ctx. Each handling holds a connection of the pool until it commits:
// set db.SetMaxOpenConns above the bus's Concurrency plus one.
package mysql

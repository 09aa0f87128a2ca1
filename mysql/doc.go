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
// A claim is one READ COMMITTED transaction: SELECT … FOR UPDATE SKIP
// LOCKED over the (transport, available_at, id) index, then an UPDATE that
// leases the rows under a new token. Concurrent claimers in any process
// skip each other's rows instead of waiting. READ COMMITTED takes no gap
// locks, so claims never block inserts.
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

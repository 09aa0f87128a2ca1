package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

// server is the loopback MariaDB of the development machines and CI.
var server = &storetest.Service[*sql.DB]{
	Name: "MariaDB/MySQL", Env: "POSTBUS_TEST_MYSQL_DSN", Default: "root@tcp(127.0.0.1:3306)/test",
	Show:  driver.Redact,
	Open:  openDB,
	Close: func(db *sql.DB) { _ = db.Close() },
}

func TestMain(m *testing.M) {
	storetest.Main(m, storetest.Setup{
		Children: []func(){runOutboxChildIfAsked, func() { storetest.WorkerIfAsked(openWorker) }},
		Shutdown: server.Shutdown,
		Leaks:    func() error { return goleak.Find() },
	})
}

func testDSN() string { return server.Addr() }

// serverUnavailable skips the test, or fails it under CI=true.
func serverUnavailable(t testing.TB, err error) { t.Helper(); server.Unavailable(t, err) }

// testDB returns the shared handle, skipping the test when the server is
// not reachable.
func testDB(t testing.TB) *sql.DB { t.Helper(); return server.Shared(t) }

// newDB opens a handle of the test's own, closed at cleanup.
func newDB(t testing.TB, maxConns int) *sql.DB { t.Helper(); return server.Own(t, maxConns) }

func openDB(ctx context.Context, dsn string, maxConns int) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// freshTable returns a table name no other test or run uses.
func freshTable() string { return "pb_" + bustest.Namespace() }

// newStore returns a set-up store on db whose tables are named after a
// fresh table name (unless opts names one), dropped at cleanup.
func newStore(t testing.TB, db *sql.DB, opts mysql.Options) *mysql.Persistence {
	t.Helper()
	if opts.Table == "" {
		opts.Table = freshTable()
	}
	p, err := mysql.New(db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := p.Setup(t.Context()); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { dropTables(db, opts.Table) })
	return p
}

// dropTables removes the tables of Options.Table table.
func dropTables(db *sql.DB, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"", "_inbox", "_sagas", "_failed", "_recurring", "_runs"} {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+table+s+"`")
	}
}

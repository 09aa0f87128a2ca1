package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/mysql"
)

// defaultDSN is the loopback MariaDB of the development machines and CI.
const defaultDSN = "root@tcp(127.0.0.1:3306)/test"

// dsnEnv overrides defaultDSN.
const dsnEnv = "POSTBUS_TEST_MYSQL_DSN"

func testDSN() string {
	if d := os.Getenv(dsnEnv); d != "" {
		return d
	}
	return defaultDSN
}

// shared is the handle most tests use, opened lazily and closed by
// TestMain before the goroutine-leak check.
var shared struct {
	once sync.Once
	db   *sql.DB
	err  error
}

func TestMain(m *testing.M) {
	if runChildIfAsked() {
		return
	}
	code := m.Run()
	if shared.db != nil {
		_ = shared.db.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverUnavailable skips the test, or fails it under CI=true.
func serverUnavailable(t testing.TB, err error) {
	t.Helper()
	bustest.SkipOutsideCI(t, "MariaDB/MySQL not reachable at %s (set %s): %v", driver.Redact(testDSN()), dsnEnv, err)
}

// testDB returns the shared handle, skipping the test when the server is
// not reachable.
func testDB(t testing.TB) *sql.DB {
	t.Helper()
	shared.once.Do(func() {
		shared.db, shared.err = openDB(context.Background(), 20)
	})
	if shared.err != nil {
		serverUnavailable(t, shared.err)
	}
	return shared.db
}

// newDB opens a handle of the test's own, closed at cleanup.
func newDB(t testing.TB, maxConns int) *sql.DB {
	t.Helper()
	db, err := openDB(t.Context(), maxConns)
	if err != nil {
		serverUnavailable(t, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openDB(ctx context.Context, maxConns int) (*sql.DB, error) {
	db, err := sql.Open("mysql", testDSN())
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

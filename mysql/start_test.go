package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mysql"
)

// startTimeout is the StartTimeout of the start-up tests whose store comes
// up late: generous, since the machine is shared.
const startTimeout = 20 * time.Second

// storeAt returns a Persistence with fresh tables (dropped at cleanup) on
// a handle of its own whose DSN is the test server's changed by edit. The
// handle connects lazily, so the server need not be reachable yet.
func storeAt(t *testing.T, edit func(*mysqldriver.Config)) *mysql.Persistence {
	t.Helper()
	cfg := serverConfig(t)
	edit(cfg)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	table := freshTable()
	shared := testDB(t)
	t.Cleanup(func() { dropTables(shared, table) })
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func serverConfig(t *testing.T) *mysqldriver.Config {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Start with a database that comes up 3 s after it waits for it and
// succeeds, logging the unreachable store once at Warn.
func TestStartWaitsForDatabaseThatComesUpLate(t *testing.T) {
	t.Parallel()
	testDB(t) // skips when the server is absent
	addr := drivertest.LateService(t, serverConfig(t).Addr, 3*time.Second)
	p := storeAt(t, func(c *mysqldriver.Config) { c.Addr = addr })
	drivertest.WantStartWaits(t, p, addr, 3*time.Second, startTimeout)
}

// Start with a database that never comes up fails after StartTimeout with
// an error matching bus.ErrStoreUnavailable.
func TestStartGivesUpOnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	addr := bustest.DeadAddr(t)
	p := storeAt(t, func(c *mysqldriver.Config) { c.Addr = addr })
	drivertest.WantStartUnavailable(t, p, 2*time.Second)
}

// Start fails at once, without bus.ErrStoreUnavailable, when the server
// refuses what it is asked: a wrong password, an unknown database, a user
// without access to the database.
func TestStartFailsAtOnceOnPermanentErrors(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	user := drivertest.Unique("pbu_")
	if _, err := db.ExecContext(t.Context(), "CREATE USER '"+user+"'@'%'"); err != nil {
		t.Fatalf("create user: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'")
	})
	for name, c := range map[string]struct {
		edit func(*mysqldriver.Config)
		want string
	}{
		"wrong password":   {func(c *mysqldriver.Config) { c.Passwd = "pbtest-wrong" }, "1045"},
		"unknown database": {func(c *mysqldriver.Config) { c.DBName = "pbtest_no_such_db" }, "1049"},
		"access denied":    {func(c *mysqldriver.Config) { c.User, c.Passwd = user, "" }, "1044"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drivertest.WantStartFailsAtOnce(t, storeAt(t, c.edit), startTimeout, c.want)
		})
	}
}

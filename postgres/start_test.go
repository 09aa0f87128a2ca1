package postgres_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// startTimeout is the StartTimeout of the start-up tests whose store comes
// up late: generous, since the machine is shared.
const startTimeout = 20 * time.Second

// storeAt returns a Persistence in a fresh schema on a pool of its own
// whose connection settings are the test server's changed by edit. The
// pool connects lazily, so the server need not be reachable yet.
func storeAt(t *testing.T, edit func(*pgxpool.Config)) *postgres.Persistence {
	t.Helper()
	p, err := postgres.New(poolAt(t, edit), postgres.Options{Schema: freshSchema(t, testPool(t))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// poolAt returns a pool, closed at cleanup, whose connection settings are
// the test server's changed by edit. It connects lazily.
func poolAt(t *testing.T, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	edit(cfg)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// serverAddr returns the test server's host:port.
func serverAddr(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// at points a pool's configuration at addr (host:port).
func at(t *testing.T, addr string) func(*pgxpool.Config) {
	return func(c *pgxpool.Config) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(port)
		c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = host, uint16(n), nil
	}
}

// Start with a database that comes up 3 s after it waits for it and
// succeeds, logging the unreachable store once at Warn.
func TestStartWaitsForDatabaseThatComesUpLate(t *testing.T) {
	t.Parallel()
	testPool(t) // skips when the server is absent
	addr := drivertest.LateService(t, serverAddr(t), 3*time.Second)
	p := storeAt(t, at(t, addr))
	drivertest.WantStartWaits(t, p, addr, 3*time.Second, startTimeout)
}

// Start with a PostgreSQL transport whose database comes up 3 s after it
// waits for it and succeeds: Provision is retried like Setup.
func TestStartWaitsForTransportDatabaseThatComesUpLate(t *testing.T) {
	t.Parallel()
	addr := drivertest.LateService(t, serverAddr(t), 3*time.Second)
	tr := newTransport(t, poolAt(t, at(t, addr)), freshSchema(t, testPool(t)), postgres.TransportOptions{})
	r := drivertest.StartConfig(t, bus.Config{Transport: tr, SendOnly: true, StartTimeout: startTimeout})
	if r.Err != nil {
		t.Fatalf("Start with the transport's database up 3 s late = %v after %v, want success", r.Err, r.Took)
	}
	if !strings.Contains(r.Log, addr) {
		t.Errorf("the log does not name %s:\n%s", addr, r.Log)
	}
}

// Start with a database that never comes up fails after StartTimeout with
// an error matching bus.ErrStoreUnavailable.
func TestStartGivesUpOnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	addr := bustest.DeadAddr(t)
	p := storeAt(t, at(t, addr))
	err := drivertest.WantStartUnavailable(t, p, 2*time.Second)
	if err != nil && !strings.Contains(err.Error(), addr) {
		t.Errorf("Start = %v, want it to name %s", err, addr)
	}
}

// Start fails at once, without bus.ErrStoreUnavailable, when the server
// refuses what it is asked: an unknown database, an unknown role, a role
// that may not create the schema.
func TestStartFailsAtOnceOnPermanentErrors(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	role := drivertest.Unique("pbtest_role_")
	if _, err := pool.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	for name, c := range map[string]struct {
		edit func(*pgxpool.Config)
		want string
	}{
		"unknown database":  {func(c *pgxpool.Config) { c.ConnConfig.Database = "pbtest_no_such_db" }, "3D000"},
		"unknown role":      {func(c *pgxpool.Config) { c.ConnConfig.User = "pbtest_no_such_role" }, "28000"},
		"permission denied": {func(c *pgxpool.Config) { c.ConnConfig.User = role }, "42501"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drivertest.WantStartFailsAtOnce(t, storeAt(t, c.edit), startTimeout, c.want)
		})
	}
}

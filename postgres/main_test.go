package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// server is the loopback PostgreSQL of the development machines and CI.
var server = &storetest.Service[*pgxpool.Pool]{
	Name: "PostgreSQL", Env: "POSTBUS_TEST_POSTGRES_URL", Default: "postgres://root@127.0.0.1:5432/test?sslmode=disable",
	Open: func(ctx context.Context, url string, n int) (*pgxpool.Pool, error) {
		return openPoolAt(ctx, url, int32(n), nil)
	},
	Close: (*pgxpool.Pool).Close,
}

func TestMain(m *testing.M) {
	storetest.Main(m, storetest.Setup{
		Children: []func(){
			func() {
				if args, ok := bustest.OutboxChild(); ok {
					runOutboxChild(args) // the outbox crash case's child; never returns
				}
			},
			func() {
				if v, ok := os.LookupEnv(transportChildEnv); ok {
					runTransportChild(v) // the transport exactly-once case's child; never returns
				}
			},
		},
		Shutdown: server.Shutdown,
		Leaks:    func() error { return goleak.Find() },
	})
}

func testURL() string { return server.Addr() }

// serverUnavailable skips the test, or fails it under CI=true.
func serverUnavailable(t testing.TB, err error) { t.Helper(); server.Unavailable(t, err) }

// testPool returns the shared pool, skipping the test when the server is
// not reachable.
func testPool(t testing.TB) *pgxpool.Pool { t.Helper(); return server.Shared(t) }

// newPool opens a pool of the test's own, closed at cleanup.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return server.Own(t, int(maxConns))
}

// simplePool opens a pool of the test's own that uses pgx's simple
// protocol (no named prepared statements), as behind PgBouncer in
// transaction mode; closed at cleanup.
func simplePool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	testPool(t)
	pool, err := openPoolAt(t.Context(), testURL(), maxConns, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return openPoolAt(ctx, testURL(), maxConns, nil)
}

// openPoolAt opens a pool on url, configured further by configure when
// not nil, and checks that the server answers.
func openPoolAt(ctx context.Context, url string, maxConns int32, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// freshSchema returns a new random schema name whose schema is dropped at
// cleanup.
func freshSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := drivertest.Unique("pbtest_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// newStore returns a set-up Persistence in a fresh schema on pool.
func newStore(t testing.TB, pool *pgxpool.Pool, opts postgres.Options) *postgres.Persistence {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = freshSchema(t, pool)
	}
	p, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := p.Setup(t.Context()); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return p
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/postbus/bus/postgres"

	"github.com/postbus/bus/bustest"
)

const defaultURL = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

func testURL() string {
	if u := os.Getenv("POSTBUS_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultURL
}

// shared is the pool most tests use, opened lazily and closed by TestMain
// before the goroutine-leak check.
var shared struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

func TestMain(m *testing.M) {
	if args, ok := bustest.OutboxChild(); ok {
		runOutboxChild(args) // the outbox crash case's child; never returns
	}
	if v, ok := os.LookupEnv(transportChildEnv); ok {
		runTransportChild(v) // the transport exactly-once case's child; never returns
	}
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
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
	bustest.SkipOutsideCI(t, "PostgreSQL not reachable at %s (set POSTBUS_TEST_POSTGRES_URL): %v", testURL(), err)
}

// testPool returns the shared pool, skipping the test when the server is
// not reachable.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	shared.once.Do(func() {
		shared.pool, shared.err = openPool(context.Background(), 20)
	})
	if shared.err != nil {
		serverUnavailable(t, shared.err)
	}
	return shared.pool
}

// newPool opens a pool of the test's own, closed at cleanup.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := openPool(t.Context(), maxConns)
	if err != nil {
		serverUnavailable(t, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
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
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "pbtest_" + hex.EncodeToString(b[:])
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

package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testSoak.remove()
		os.Exit(code)
	}))
}

// testSoak is the soak program the tests run, built once (soakBinary).
var testSoak soakBuild

// soakBuild is the soak program (./soak) built once for every test that
// runs it, in a directory TestMain removes.
type soakBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// soakBinary returns the path of the soak program, building it on the
// first call.
func soakBinary(t testing.TB) string {
	t.Helper()
	b := &testSoak
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "postbus-e2e-soak-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "soak")
		if out, err := exec.Command("go", "build", "-o", b.bin, "./soak").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build soak: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func (b *soakBuild) remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// env returns the environment variable name, or def when it is unset.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func postgresURL() string {
	return env("POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
}

func rabbitURL() string {
	return env("POSTBUS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
}

func natsURL() string { return env("POSTBUS_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// unavailable skips the test naming the missing service, or fails it when
// CI=true: CI must run every end-to-end test.
func unavailable(t testing.TB, service, url string, err error) {
	t.Helper()
	bustest.SkipOutsideCI(t, "%s not reachable at %s (set POSTBUS_TEST_%s_URL): %v", service, url, envSuffix(service), err)
}

func envSuffix(service string) string {
	switch service {
	case "RabbitMQ":
		return "RABBITMQ"
	case "NATS":
		return "NATS"
	}
	return "POSTGRES"
}

// suffix returns a random hex string naming one test's resources.
func suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ctxT returns a context that ends after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// newPool opens a pool of the test's own on the shared PostgreSQL, closed
// at cleanup.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return newPoolAt(t, postgresURL(), maxConns)
}

// newPoolAt opens a pool of the test's own on the server at url, closed at
// cleanup.
func newPoolAt(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("PostgreSQL URL %s: %v", url, err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = pool.Ping(ctx)
		cancel()
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		unavailable(t, "PostgreSQL", url, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// freshSchema names a new schema for one test, dropped (with its tables)
// at cleanup through pool.
func freshSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := "pbe2e_" + suffix()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// newStore returns a PostgreSQL store on pool in schema (set up by the
// bus's Start).
func newStore(t testing.TB, pool *pgxpool.Pool, schema string) *postgres.Persistence {
	t.Helper()
	p, err := postgres.New(pool, postgres.Options{Schema: schema, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testLogger writes warnings and errors into the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startBus creates a bus from cfg, lets register add handlers, starts it,
// and stops it at cleanup (before the cleanups registered earlier: pools,
// transports, schemas).
func startBus(t testing.TB, cfg bus.Config, register func(*bus.Bus)) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(b)
	}
	if err := b.Start(ctxT(t, 30*time.Second)); err != nil {
		t.Fatalf("start %s: %v", cfg.Endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop %s: %v", cfg.Endpoint, err)
		}
	})
	return b
}

// waitFor polls cond every 20 ms until it holds (true) or timeout passes
// (false).
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// quietLogger writes only errors into the test's output, for drivers that
// warn on every reconnection attempt during an outage.
func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// storeStats reads the rows left in a scheduled-message table and the
// dispatch failures recorded on them.
// waitStoreEmpty waits until every scheduled row was dispatched and deleted.
func waitStoreEmpty(t testing.TB, pool *pgxpool.Pool, table string) {
	t.Helper()
	drivertest.Eventually(t, 30*time.Second, func() bool {
		rows, _ := storeStats(t, pool, table)
		return rows == 0
	}, "an empty table")
}

func storeStats(t testing.TB, pool *pgxpool.Pool, table string) (rows, failures int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(failures), 0) FROM `+table).Scan(&rows, &failures)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return rows, failures
}

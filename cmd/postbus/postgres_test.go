package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

const defaultPostgresURL = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

func postgresURL() string {
	if u := os.Getenv("POSTBUS_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultPostgresURL
}

// postgresFixture sets up a fresh schema with the fixture, and returns the
// environment that points the command at it.
func postgresFixture(t *testing.T) (*postgres.Persistence, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := postgresURL()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		bustest.SkipOutsideCI(t, "PostgreSQL not reachable at %s (set POSTBUS_TEST_POSTGRES_URL): %v", url, err)
	}
	schema := bustest.Namespace()
	p, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	seed(t, p)
	return p, map[string]string{"POSTBUS_POSTGRES_URL": url, "POSTBUS_POSTGRES_SCHEMA": schema}
}

func TestGoldenPostgres(t *testing.T) {
	t.Parallel()
	p, env := postgresFixture(t)
	checkGolden(t, openBackends, env, p)
}

func TestChangesPostgres(t *testing.T) {
	t.Parallel()
	p, env := postgresFixture(t)
	ctx := context.Background()
	r := runApp(t, openBackends, env, "scheduled", "cancel", "0190f5d6-0000-7000-8000-000000000000")
	if r.code != exitOK || r.stdout != "cancelled 1 of 1 message(s)\n" {
		t.Fatalf("cancel: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runApp(t, openBackends, env, "scheduled", "send-now", "0190f5d6-0000-7000-8000-000000000001")
	if r.code != exitOK || r.stdout != "made due now 1 of 1 message(s)\n" {
		t.Fatalf("send-now: %d %q %q", r.code, r.stdout, r.stderr)
	}
	m, ok, err := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000001")
	if err != nil || !ok || m.DueAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("send-now: %v %v due %v", ok, err, m.DueAt)
	}
	r = runApp(t, openBackends, env, "failed", "delete", "--group", bus.FailureGroup("billing.ChargeCard", "billing", "card 1 declined"))
	if r.code != exitOK || r.stdout != "deleted 4 of 4 message(s)\n" {
		t.Fatalf("delete group: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Retry needs a transport: without one the command says so and
	// changes nothing.
	r = runApp(t, openBackends, env, "failed", "retry", "--all")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no transport") {
		t.Fatalf("retry without transport: %d %q", r.code, r.stderr)
	}
	if n, _ := p.CountFailed(ctx, bus.FailedQuery{}); n != 1 {
		t.Errorf("%d failed messages left, want 1", n)
	}
}

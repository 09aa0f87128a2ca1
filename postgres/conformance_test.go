package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

func TestScheduledMessageConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newStore(t, pool, postgres.Options{})
	})
}

func TestScheduledMessageConformanceWithoutNotify(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newStore(t, pool, postgres.Options{DisableNotify: true})
	})
}

// TestScheduledMessageConformanceBehindPgBouncer runs the suite the way a
// PgBouncer transaction-mode deployment would: no LISTEN/NOTIFY and no named
// prepared statements (pgx's simple protocol).
func TestScheduledMessageConformanceBehindPgBouncer(t *testing.T) {
	t.Parallel()
	testPool(t)
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newStore(t, pool, postgres.Options{DisableNotify: true})
	})
}

// BenchmarkConformance runs the shared store benchmark against PostgreSQL.
func BenchmarkConformance(b *testing.B) {
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore {
		return newStore(b, testPool(b), postgres.Options{})
	})
}

package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// TestConformance runs every store suite, each case in a schema of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	storetest.Conformance(t, storetest.Suites{
		Store: stores(pool, postgres.Options{}),
		Sagas: true, Recurring: true, Browser: true, Failed: true,
		Outbox: func(t *testing.T) bustest.OutboxHarness { return outboxHarness(t, pool) },
		CallerTx: &bustest.CallerTxHarness{
			NewStore: func(t *testing.T) bus.Persistence { return newStore(t, pool, postgres.Options{}) },
			Begin: func(t *testing.T, ctx context.Context, _ bus.Persistence) (context.Context, func() error, func() error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					serverUnavailable(t, err)
				}
				return postgres.WithTx(ctx, tx), func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
			},
		},
	})
}

// TestConformanceWithoutNotify runs the suites that wake on NOTIFY with it
// turned off: the store polls.
func TestConformanceWithoutNotify(t *testing.T) {
	t.Parallel()
	storetest.Conformance(t, storetest.Suites{Store: stores(testPool(t), postgres.Options{DisableNotify: true}), Browser: true})
}

// TestConformanceBehindPgBouncer runs the suites the way a PgBouncer
// transaction-mode deployment would: no LISTEN/NOTIFY and no named
// prepared statements (pgx's simple protocol).
func TestConformanceBehindPgBouncer(t *testing.T) {
	t.Parallel()
	storetest.Conformance(t, storetest.Suites{Store: stores(simplePool(t, 8), postgres.Options{DisableNotify: true}), Sagas: true})
}

// stores returns a factory of set-up stores with opts, each in a fresh
// schema on pool.
func stores(pool *pgxpool.Pool, opts postgres.Options) func(t *testing.T) bus.ScheduledStore {
	return func(t *testing.T) bus.ScheduledStore { return newStore(t, pool, opts) }
}

// BenchmarkConformance runs the shared store benchmark against PostgreSQL.
func BenchmarkConformance(b *testing.B) {
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore {
		return newStore(b, testPool(b), postgres.Options{})
	})
}

package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// TestClaimFailover runs a worker process that claims rows and holds them,
// then kills or freezes it, and checks when a bus in the test process
// hands the rows over (storetest.Failover). Claims hold their rows locked
// in an open transaction: a killed process's connection closes and the
// server frees its rows at once; a frozen process's transaction is ended
// by the server once it has idled for the look-ahead window and the lease.
func TestClaimFailover(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process failover test skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := buildWorker(t, "multiproc")
	t.Run("Killed", func(t *testing.T) {
		t.Parallel()
		failover(t, pool, bin).Killed(t)
	})
	t.Run("Frozen", func(t *testing.T) {
		t.Parallel()
		failover(t, pool, bin).Frozen(t, storetest.FreezeTiming{Due: 4 * time.Second, Lease: 3 * time.Second, Window: 2 * time.Second, Margin: 3 * time.Second})
	})
}

func failover(t *testing.T, pool *pgxpool.Pool, bin string) storetest.Failover {
	w := workers(t, pool, bin)
	table := w.Store.(*postgres.Persistence).Table()
	return storetest.Failover{Workers: w,
		// A SKIP LOCKED probe finds none of the rows free (nor leased, as
		// claims of earlier versions held rows, so that the test runs, and
		// fails, against them).
		Held: func(ctx context.Context) (total, free int, err error) {
			err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table+`),
				(SELECT count(*) FROM (SELECT 1 FROM `+table+`
					WHERE lease_token IS NULL OR lease_until <= now() FOR KEY SHARE SKIP LOCKED) AS f)`).Scan(&total, &free)
			return total, free, err
		},
		Takeover: func(t *testing.T) bus.Persistence {
			p, err := postgres.New(pool, postgres.Options{Schema: w.Space})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
}

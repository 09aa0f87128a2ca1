package postgres_test

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

func TestCallerTxConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.CallerTxTests(t, bustest.CallerTxHarness{
		NewStore: func(t *testing.T) bus.Persistence { return newStore(t, pool, postgres.Options{}) },
		Begin: func(t *testing.T, ctx context.Context, _ bus.Persistence) (context.Context, func() error, func() error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				serverUnavailable(t, err)
			}
			return postgres.WithTx(ctx, tx), func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
		},
	})
}

package sqlite_test

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

func TestCallerTxConformance(t *testing.T) {
	t.Parallel()
	bustest.CallerTxTests(t, bustest.CallerTxHarness{
		NewStore: func(t *testing.T) bus.Persistence { return openTemp(t) },
		Begin: func(t *testing.T, ctx context.Context, p bus.Persistence) (context.Context, func() error, func() error) {
			tx, err := p.(*sqlite.Persistence).DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return sqlite.WithTx(ctx, tx), tx.Commit, tx.Rollback
		},
	})
}

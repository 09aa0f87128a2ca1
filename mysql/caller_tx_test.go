package mysql_test

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mysql"
)

func TestCallerTxConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.CallerTxTests(t, bustest.CallerTxHarness{
		NewStore: func(t *testing.T) bus.Persistence { return newStore(t, db, mysql.Options{}) },
		Begin: func(t *testing.T, ctx context.Context, _ bus.Persistence) (context.Context, func() error, func() error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return mysql.WithTx(ctx, tx), tx.Commit, tx.Rollback
		},
	})
}

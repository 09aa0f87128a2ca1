package mysql_test

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

// TestConformance runs every store suite, each case on tables of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	newP := func(t *testing.T) bus.Persistence { return newStore(t, db, mysql.Options{}) }
	storetest.Conformance(t, storetest.Suites{
		Store: func(t *testing.T) bus.ScheduledStore { return newStore(t, db, mysql.Options{}) },
		Sagas: true, Recurring: true, Browser: true, Failed: true,
		Outbox: func(t *testing.T) bustest.OutboxHarness { return outboxHarness(t, db) },
		CallerTx: &bustest.CallerTxHarness{NewStore: newP,
			Begin: func(t *testing.T, ctx context.Context, _ bus.Persistence) (context.Context, func() error, func() error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return mysql.WithTx(ctx, tx), tx.Commit, tx.Rollback
			}},
	})
}

// BenchmarkConformance runs the shared store benchmark against the server.
func BenchmarkConformance(b *testing.B) {
	db := testDB(b)
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore { return newStore(b, db, mysql.Options{}) })
}

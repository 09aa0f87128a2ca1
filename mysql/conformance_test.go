package mysql_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mysql"
)

func TestScheduledMessageConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newStore(t, db, mysql.Options{})
	})
}

func TestSagaConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.SagaTests(t, func(t *testing.T) bus.SagaStore { return newStore(t, db, mysql.Options{}) })
}

func TestRecurringStoreConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore { return newStore(t, db, mysql.Options{}) })
}

func TestScheduledBrowserConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser { return newStore(t, db, mysql.Options{}) })
}

func TestFailedStoreConformance(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore { return newStore(t, db, mysql.Options{}) })
}

// BenchmarkConformance runs the shared store benchmark against the server.
func BenchmarkConformance(b *testing.B) {
	db := testDB(b)
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore { return newStore(b, db, mysql.Options{}) })
}

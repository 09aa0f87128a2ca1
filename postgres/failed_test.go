package postgres_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

func TestFailedStoreConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore {
		return newStore(t, pool, postgres.Options{})
	})
}

package postgres_test

import (
	"testing"

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

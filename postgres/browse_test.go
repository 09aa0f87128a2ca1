package postgres_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

func TestScheduledBrowserConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser {
		return newStore(t, pool, postgres.Options{})
	})
}

func TestScheduledBrowserConformanceWithoutNotify(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser {
		return newStore(t, pool, postgres.Options{DisableNotify: true})
	})
}

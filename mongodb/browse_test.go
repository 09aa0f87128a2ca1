package mongodb_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestScheduledBrowserConformance(t *testing.T) {
	t.Parallel()
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser {
		return newStore(t, testEnv.client)
	})
}

func TestFailedStoreConformance(t *testing.T) {
	t.Parallel()
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore {
		return newStore(t, testEnv.client)
	})
}

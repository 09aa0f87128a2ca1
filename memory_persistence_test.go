package bus_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestMemoryPersistenceConformance(t *testing.T) {
	t.Parallel()
	bustest.ScheduledMessageTests(t, func(*testing.T) bus.ScheduledStore { return bus.NewMemoryPersistence() })
}

func BenchmarkMemoryPersistence(b *testing.B) {
	bustest.BenchmarkScheduledStore(b, func(*testing.B) bus.ScheduledStore { return bus.NewMemoryPersistence() })
}

func TestMemoryScheduledBrowser(t *testing.T) {
	bustest.ScheduledBrowserTests(t, func(*testing.T) bus.ScheduledBrowser { return bus.NewMemoryPersistence() })
}

func TestMemoryFailedStore(t *testing.T) {
	bustest.FailedStoreTests(t, func(*testing.T) bus.FailedStore { return bus.NewMemoryPersistence() })
}

package bus_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestMemoryRecurringStore(t *testing.T) {
	t.Parallel()
	bustest.RecurringTests(t, func(*testing.T) bus.RecurringStore { return bus.NewMemoryPersistence() })
}

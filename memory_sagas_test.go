package bus_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestMemorySagaStore(t *testing.T) {
	bustest.SagaTests(t, func(*testing.T) bus.SagaStore { return bus.NewMemoryPersistence() })
}

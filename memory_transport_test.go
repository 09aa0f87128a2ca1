package bus_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestMemoryTransportConformance(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	bustest.TransportTests(t, func(*testing.T) bus.Transport { return tr }, bustest.Features{NativeRedelivery: true})
}

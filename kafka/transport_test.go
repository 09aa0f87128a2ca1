package kafka_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		tr, _ := newTransport(t)
		return tr
	}, bustest.Features{OrderedByKey: true, NativeRedelivery: false})
}

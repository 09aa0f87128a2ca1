package kafka_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// maxTestPayload is the largest body the suite sends: a broker's default
// message.max.bytes is about 1 MiB for the whole record batch, headers
// included.
const maxTestPayload = 1<<20 - 16<<10

func TestConformance(t *testing.T) {
	t.Parallel()
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		tr, _ := newTransport(t)
		return tr
	}, bustest.Features{OrderedByKey: true, NativeRedelivery: false, MaxMessageSize: maxTestPayload})
}

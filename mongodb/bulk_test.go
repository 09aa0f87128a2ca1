package mongodb_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// BenchmarkStoreOutgoingBulk stores 10,000 messages due in an hour per
// call: the shape of a SendBatch of 10,000 messages, one unordered
// InsertMany.
func BenchmarkStoreOutgoingBulk(b *testing.B) {
	bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore { return newStore(b, testEnv.client) }, 10_000)
}

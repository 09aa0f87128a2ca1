package sqlite_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// BenchmarkStoreOutgoingBulk stores 10,000 rows due in an hour per call:
// the shape of a SendBatch of 10,000 messages, in one transaction.
func BenchmarkStoreOutgoingBulk(b *testing.B) {
	bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore { return openTemp(b) }, 10_000)
}

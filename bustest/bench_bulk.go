package bustest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// BenchmarkStoreBulk measures StoreOutgoing with calls of size rows due in
// an hour, the shape of a Bus.SendBatch of size messages, and reports
// rows/s. Building the rows is not timed. Run it from a driver's
// benchmarks:
//
//	func BenchmarkStoreOutgoingBulk(b *testing.B) {
//		bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore { … }, 10_000)
//	}
func BenchmarkStoreBulk(b *testing.B, newStore BenchStoreFactory, size int) {
	benchmarkStore(b, newStore(b), size)
}

// benchmarkStore times StoreOutgoing calls of size rows due in an hour, and
// reports rows/s.
func benchmarkStore(b *testing.B, s bus.ScheduledStore, size int) {
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	n := 0
	for b.Loop() {
		b.StopTimer()
		msgs := rows(fmt.Sprintf("s%d", n), size, func(int) time.Time { return due })
		b.StartTimer()
		if err := s.StoreOutgoing(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n*size)/b.Elapsed().Seconds(), "rows/s")
}

package bustest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// BenchStoreFactory returns a new, empty, isolated store for one benchmark.
type BenchStoreFactory func(b *testing.B) bus.ScheduledStore

// BenchmarkScheduledStore measures a store the way the dispatcher uses it:
// "Store" inserts rows in batches of 100; "ClaimDelete" claims due rows in
// batches of 100 and deletes them. Run it from a driver's benchmarks:
//
//	func BenchmarkConformance(b *testing.B) {
//		bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore { … })
//	}
func BenchmarkScheduledStore(b *testing.B, newStore BenchStoreFactory) {
	const batch = 100
	b.Run("Store", func(b *testing.B) {
		s := newStore(b)
		ctx := context.Background()
		due := time.Now().Add(time.Hour)
		n := 0
		for b.Loop() {
			b.StopTimer()
			msgs := rows(fmt.Sprintf("s%d", n), batch, func(int) time.Time { return due })
			b.StartTimer()
			if err := s.StoreOutgoing(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("ClaimDelete", func(b *testing.B) {
		s := newStore(b)
		ctx := context.Background()
		past := time.Now().Add(-time.Second)
		n := 0
		for b.Loop() {
			b.StopTimer()
			if err := s.StoreOutgoing(ctx, rows(fmt.Sprintf("c%d", n), batch, func(int) time.Time { return past })); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			got, err := s.ClaimDueOutgoing(ctx, time.Now(), batch, time.Minute)
			if err != nil || len(got) != batch {
				b.Fatalf("claimed %d rows, err %v; want %d", len(got), err, batch)
			}
			if err := s.DeleteOutgoing(ctx, ids(got)); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "rows/s")
	})
}

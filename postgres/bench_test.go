package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// BenchmarkStoreOutgoingConcurrent stores one row per call from 64
// concurrent goroutines, the shape of 64 senders each scheduling a message:
// the batcher groups them into shared INSERTs. Reports rows/s. "due=1h"
// stores rows due in an hour (no notification: beyond NotifyWithin);
// "due=1s" rows due in a second, so every INSERT also notifies.
//
//	go test -run '^$' -bench StoreOutgoingConcurrent -benchtime 200000x
func BenchmarkStoreOutgoingConcurrent(b *testing.B) {
	for _, ahead := range []time.Duration{time.Hour, time.Second} {
		b.Run(fmt.Sprintf("due=%v", ahead), func(b *testing.B) {
			benchStore(b, postgres.Options{}, ahead)
		})
	}
}

func benchStore(b *testing.B, opts postgres.Options, ahead time.Duration) {
	pool := newPool(b, 8)
	p := newStore(b, pool, opts)
	env := bus.MarshalEnvelope(&bus.Envelope{ID: "x", Type: "bench.Msg", Kind: bus.KindCommand,
		Body: make([]byte, 200), Destination: "bench"})
	due := time.Now().Add(ahead)
	var seq atomic.Int64
	ctx := b.Context()
	b.SetParallelism(64 / max(1, 2)) // 64 senders on this 2-core machine's GOMAXPROCS=2
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("bench-%09d", seq.Add(1))
			if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: id, Kind: bus.KindCommand, Envelope: env, DueAt: due}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// BenchmarkSendReceive measures in-memory send-to-handler round trips: one
// Send, one handler call, one completion signal.
func BenchmarkSendReceive(b *testing.B) {
	ctx := context.Background()
	done := make(chan struct{}, 1024)
	bb, err := bus.New(bus.Config{Endpoint: "bench", Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	_ = bus.Handle(bb, func(context.Context, PlaceOrder) error { done <- struct{}{}; return nil })
	_ = bus.Route[PlaceOrder](bb, "bench")
	if err := bb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer bb.Stop(ctx)
	msg := PlaceOrder{ID: "o-1"}
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			if err := bb.Send(ctx, msg); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	for range b.N {
		<-done
	}
}

// BenchmarkScheduleDelayed measures storing delayed sends in the in-memory
// store from parallel senders.
func BenchmarkScheduleDelayed(b *testing.B) {
	ctx := context.Background()
	bb, err := bus.New(bus.Config{Endpoint: "bench", SendOnly: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	if err := bb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer bb.Stop(ctx)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bb.Send(ctx, PlaceOrder{ID: "o-1"}, bus.To("x"), bus.DeliverAfter(time.Hour)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

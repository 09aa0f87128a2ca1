package otelbus_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/postbus/bus"
	otelbus "github.com/postbus/bus/otel"
)

// BenchmarkSendToHandler measures in-memory send-to-handler round trips on
// a bare bus and on one observed by otelbus: every span sampled and handed
// to a no-op exporter, every metric recorded (never collected). Compare the
// ns/op of the two sub-benchmarks for the adapter's overhead.
func BenchmarkSendToHandler(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchSendToHandler(b, nil) })
	b.Run("otel", func(b *testing.B) {
		benchObserved(b, sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter())))
	})
	// Metrics and trace propagation only: no span is sampled.
	b.Run("otel-unsampled", func(b *testing.B) {
		benchObserved(b, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))
	})
}

// benchObserved runs benchSendToHandler with otelbus on tp and a meter
// provider whose metrics are recorded but never collected.
func benchObserved(b *testing.B, tp *sdktrace.TracerProvider) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}()
	obs, err := otelbus.New(otelbus.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	benchSendToHandler(b, obs)
}

func benchSendToHandler(b *testing.B, obs bus.Observer) {
	ctx := context.Background()
	done := make(chan struct{}, 1024)
	bb, err := bus.New(bus.Config{Endpoint: "bench", Logger: quiet(), Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	_ = bus.Handle(bb, func(context.Context, Remind) error { done <- struct{}{}; return nil })
	_ = bus.Route[Remind](bb, "bench")
	if err := bb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bb.Stop(ctx) }()
	msg := Remind{Order: "o-1"}
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

package otelbus_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	otelbus "github.com/postbus/bus/otel"
)

// Example traces a delayed message: the spans of its delivery link to the
// span that scheduled it.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider()
	defer func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) }()

	obs, err := otelbus.New(otelbus.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		fmt.Println(err)
		return
	}
	clock := bustest.NewFakeClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	b, err := bus.New(bus.Config{Endpoint: "reminders", Clock: clock, Observer: obs, Logger: quiet()})
	if err != nil {
		fmt.Println(err)
		return
	}
	handled := make(chan struct{})
	_ = bus.Handle(b, func(ctx context.Context, m Remind) error { close(handled); return nil })
	_ = b.Send(ctx, Remind{Order: "o-1"}, bus.To("reminders"), bus.DeliverAfter(time.Hour))
	clock.Advance(time.Hour)
	_ = b.Start(ctx)
	<-handled
	_ = b.Stop(ctx)

	var scheduled sdktrace.ReadOnlySpan
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
		if s.Name() == "schedule reminders" {
			scheduled = s
		}
	}
	slices.Sort(names)
	fmt.Println(names)
	for _, s := range spans.Ended() {
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() == scheduled.SpanContext().SpanID() {
				fmt.Println(s.Name(), "links to the scheduling span")
			}
		}
	}
	// Unordered output:
	// [claim scheduled dispatch reminders process reminders receive reminders schedule reminders settle scheduled]
	// dispatch reminders links to the scheduling span
	// receive reminders links to the scheduling span
	// process reminders links to the scheduling span
}

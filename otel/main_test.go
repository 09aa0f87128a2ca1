package otelbus_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	otelbus "github.com/postbus/bus/otel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Remind is the delayed message of the tests.
type Remind struct{ Order string }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// telemetry is an Observer recording into memory: spans in a
// SpanRecorder, metrics in a ManualReader.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	obs    *otelbus.Observer
}

func newTelemetry(t testing.TB) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := otelbus.New(otelbus.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	tel.obs = obs
	return tel
}

// ended returns the ended spans whose name is name.
func (tel *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans named name have ended.
func (tel *telemetry) waitSpans(t testing.TB, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got := tel.ended(name); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range tel.spans.Ended() {
				names = append(names, s.Name())
			}
			t.Fatalf("timed out waiting for %d %q spans; ended: %v", n, name, names)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// collect reads the metrics.
func (tel *telemetry) collect(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attr returns a span attribute's value.
func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func mustAttr(t testing.TB, s sdktrace.ReadOnlySpan, key string) attribute.Value {
	t.Helper()
	v, ok := attr(s, key)
	if !ok {
		t.Fatalf("span %q has no attribute %s: %v", s.Name(), key, s.Attributes())
	}
	return v
}

// newBus creates and starts a bus, stopped when the test ends.
func newBus(t testing.TB, cfg bus.Config, setup func(*bus.Bus)) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(b)
	}
	if err := b.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

var errFlaky = errors.New("flaky")

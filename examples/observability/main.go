// Command observability traces a message across a delay and serves the
// bus's metrics to Prometheus.
//
// Two endpoints share an in-memory transport and store: "orders" handles a
// PlaceOrder and, from its handler, schedules a PaymentDue for "billing" two
// seconds later. Every span is printed as JSON by the OpenTelemetry stdout
// exporter; a summary at the end shows that the checkout, the scheduling,
// and the delivery two seconds later are one trace. Metrics, the lateness
// histogram among them, are served at /metrics by the OpenTelemetry
// Prometheus exporter.
//
//	go run ./examples/observability                 # one run, then prints the lateness series
//	go run ./examples/observability -serve           # keeps serving /metrics until Ctrl-C
//	go run ./examples/observability -addr 127.0.0.1:9464 -serve
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/postbus/bus"
	otelbus "github.com/postbus/bus/otel"
)

// PlaceOrder is handled by "orders".
type PlaceOrder struct{ OrderID string }

// PaymentDue is scheduled by "orders" for "billing".
type PaymentDue struct{ OrderID string }

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address of the /metrics endpoint")
	serve := flag.Bool("serve", false, "keep serving /metrics after the run, until interrupted")
	delay := flag.Duration("delay", 2*time.Second, "how long the payment reminder waits")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *addr, *delay, *serve); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

// run plays the scenario, writing spans and the summary to out.
func run(ctx context.Context, out io.Writer, addr string, delay time.Duration, serve bool) error {
	out = &lockedWriter{w: out} // spans end, and are printed, on the buses' goroutines
	// Traces: the stdout exporter prints each span as it ends; a recorder
	// keeps them for the summary.
	exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
	if err != nil {
		return err
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	// Metrics: the Prometheus exporter is a reader of the meter provider.
	reg := prometheus.NewRegistry()
	pexp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(pexp))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	// One trace across the delay: the delivery two seconds later is a child
	// of the span that scheduled it (the default links it instead).
	obs, err := otelbus.New(otelbus.Options{TracerProvider: tp, MeterProvider: mp, DelayedAsChild: true})
	if err != nil {
		return err
	}
	tracer := tp.Tracer("checkout")
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	transport, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	newBus := func(endpoint string) (*bus.Bus, error) {
		return bus.New(bus.Config{Endpoint: endpoint, Transport: transport, Persistence: store, Logger: logger, Observer: obs})
	}
	orders, err := newBus("orders")
	if err != nil {
		return err
	}
	billing, err := newBus("billing")
	if err != nil {
		return err
	}
	paid := make(chan time.Time, 1)
	err = errors.Join(
		bus.Route[PlaceOrder](orders, "orders"),
		bus.Route[PaymentDue](orders, "billing"),
		bus.Handle(orders, func(ctx context.Context, m PlaceOrder) error {
			return orders.Send(ctx, PaymentDue(m), bus.DeliverAfter(delay))
		}),
		bus.Handle(billing, func(ctx context.Context, m PaymentDue) error {
			paid <- time.Now()
			return nil
		}),
	)
	if err != nil {
		return err
	}
	for _, b := range []*bus.Bus{orders, billing} {
		if err := b.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = b.Stop(context.Background()) }()
	}

	cctx, checkout := tracer.Start(ctx, "checkout")
	start := time.Now()
	err = orders.Send(cctx, PlaceOrder{OrderID: "o-42"})
	checkout.End()
	if err != nil {
		return err
	}
	select {
	case at := <-paid:
		fmt.Fprintf(out, "\nPaymentDue handled %v after the checkout\n", at.Sub(start).Round(100*time.Millisecond))
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, b := range []*bus.Bus{orders, billing} {
		_ = b.Stop(ctx) // every span ends
	}
	summarize(out, rec.Ended())

	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	if err := printSeries(ctx, out, metricsURL, "postbus_delivery_lateness"); err != nil {
		return err
	}
	if serve {
		fmt.Fprintf(out, "serving %s until interrupted\n", metricsURL)
		<-ctx.Done()
	}
	return nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// summarize prints each trace with its spans in start order.
func summarize(out io.Writer, spans []sdktrace.ReadOnlySpan) {
	byTrace := map[string][]sdktrace.ReadOnlySpan{}
	var order []string
	for _, s := range spans {
		id := s.SpanContext().TraceID().String()
		if _, ok := byTrace[id]; !ok {
			order = append(order, id)
		}
		byTrace[id] = append(byTrace[id], s)
	}
	for _, id := range order {
		ss := byTrace[id]
		for i := 1; i < len(ss); i++ { // few spans: insertion sort by start
			for j := i; j > 0 && ss[j].StartTime().Before(ss[j-1].StartTime()); j-- {
				ss[j], ss[j-1] = ss[j-1], ss[j]
			}
		}
		fmt.Fprintf(out, "\ntrace %s:\n", id)
		for _, s := range ss {
			fmt.Fprintf(out, "  +%-6v %s\n", s.StartTime().Sub(ss[0].StartTime()).Round(100*time.Millisecond), s.Name())
		}
	}
}

// printSeries fetches the metrics page and prints the series named prefix.
func printSeries(ctx context.Context, out io.Writer, url, prefix string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintf(out, "\n%s (from %s):\n", prefix, url)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			fmt.Fprintln(out, " ", line)
		}
	}
	return sc.Err()
}

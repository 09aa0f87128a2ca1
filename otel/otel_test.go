package otelbus_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	otelbus "github.com/postbus/bus/otel"
	"github.com/postbus/bus/sqlite"
)

// A message scheduled for +5 s by one bus, which then stops, is dispatched
// and handled by a new bus on the same SQLite file: the trace context
// travelled through the store, and the handler's span links to the span
// that scheduled it.
func TestDelayedSpanLinksAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	path := filepath.Join(t.TempDir(), "bus.db")
	// The SQLite store compares due times on the wall clock (it is a
	// bus.ClockedStore), so the fake clock starts 5 s behind it: advancing
	// the fake clock by 5 s brings both to the due time.
	clock := bustest.NewFakeClock(time.Now().Add(-5 * time.Second))

	store1, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sender := newBus(t, bus.Config{Endpoint: "web", SendOnly: true, Transport: bus.NewMemoryTransport(),
		Persistence: store1, Clock: clock, Observer: tel.obs}, nil)
	if err := sender.Send(ctx, Remind{Order: "o-1"}, bus.To("reminders"), bus.DeliverAt(clock.Now().Add(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := sender.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store1.Close(); err != nil {
		t.Fatal(err)
	}
	scheduled := tel.waitSpans(t, "schedule reminders", 1)[0]

	clock.Advance(5 * time.Second)
	store2, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	handled := make(chan trace.SpanContext, 1)
	newBus(t, bus.Config{Endpoint: "reminders", Transport: bus.NewMemoryTransport(), Persistence: store2,
		Clock: clock, Observer: tel.obs}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Remind) error {
			handled <- trace.SpanContextFromContext(ctx)
			return nil
		})
	})
	var handlerSpan trace.SpanContext
	select {
	case handlerSpan = <-handled:
	case <-ctx.Done():
		t.Fatal("the scheduled message was not handled")
	}
	process := tel.waitSpans(t, "process reminders", 1)[0]
	if process.SpanContext().SpanID() != handlerSpan.SpanID() {
		t.Fatalf("the handler's ctx does not carry the process span")
	}
	want := scheduled.SpanContext()
	for _, name := range []string{"dispatch reminders", "receive reminders", "process reminders"} {
		s := tel.waitSpans(t, name, 1)[0]
		if len(s.Links()) != 1 {
			t.Fatalf("%s: %d links, want 1 to the scheduling span", name, len(s.Links()))
		}
		got := s.Links()[0].SpanContext
		if got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() {
			t.Fatalf("%s links to %s/%s, want the scheduling span %s/%s", name, got.TraceID(), got.SpanID(), want.TraceID(), want.SpanID())
		}
	}
	if process.SpanContext().TraceID() == want.TraceID() {
		t.Fatalf("the delayed delivery should start a trace of its own, linked to the scheduling one")
	}
	if v := mustAttr(t, scheduled, "messaging.message.id").AsString(); v != mustAttr(t, tel.waitSpans(t, "receive reminders", 1)[0], "messaging.message.id").AsString() {
		t.Fatalf("message IDs differ: %s", v)
	}
}

// An immediate message: the receive span is a child of the send span. A
// handler that fails twice then succeeds: three process spans with their
// attempts and outcomes, two immediate retries counted.
func TestRetriesAndOutcomes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	var calls atomic.Int32
	done := make(chan struct{})
	b := newBus(t, bus.Config{Endpoint: "orders", Observer: tel.obs}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Remind) error {
			if calls.Add(1) <= 2 {
				return errFlaky
			}
			close(done)
			return nil
		})
	})
	if err := b.Send(ctx, Remind{Order: "o-2"}, bus.To("orders"), bus.WithCorrelationID("conv-1")); err != nil {
		t.Fatal(err)
	}
	<-done
	recv := tel.waitSpans(t, "receive orders", 1)[0]
	send := tel.waitSpans(t, "send orders", 1)[0]
	if recv.Parent().SpanID() != send.SpanContext().SpanID() || recv.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Fatalf("an immediate message's receive span should be a child of its send span")
	}
	if got := mustAttr(t, recv, "postbus.outcome").AsString(); got != "handled" {
		t.Fatalf("outcome %q", got)
	}
	if got := mustAttr(t, recv, "postbus.attempts").AsInt64(); got != 3 {
		t.Fatalf("attempts %d", got)
	}
	if got := mustAttr(t, send, "messaging.message.conversation_id").AsString(); got != "conv-1" {
		t.Fatalf("conversation_id %q", got)
	}
	procs := tel.waitSpans(t, "process orders", 3)
	wantOutcome := map[int64]string{1: "failure", 2: "failure", 3: "success"}
	for _, p := range procs {
		n := mustAttr(t, p, "postbus.attempt").AsInt64()
		if got := mustAttr(t, p, "postbus.outcome").AsString(); got != wantOutcome[n] {
			t.Fatalf("attempt %d: outcome %q, want %q", n, got, wantOutcome[n])
		}
		if p.Parent().SpanID() != recv.SpanContext().SpanID() {
			t.Fatalf("attempt %d is not a child of the receive span", n)
		}
		if n < 3 {
			if v, _ := attr(p, "error.type"); v.AsString() != "*errors.errorString" && v.AsString() != "_OTHER" {
				t.Fatalf("attempt %d: error.type %q", n, v.AsString())
			}
		}
	}
	retries := 0
	for _, e := range recv.Events() {
		if e.Name == "postbus.retry" {
			retries++
		}
	}
	if retries != 2 {
		t.Fatalf("%d retry events on the receive span, want 2", retries)
	}
	m := tel.collect(t)
	if got := sumInt(t, m, "postbus.retries"); got != 2 {
		t.Fatalf("postbus.retries = %d, want 2", got)
	}
	if got := sumInt(t, m, "messaging.client.consumed.messages"); got != 1 {
		t.Fatalf("consumed = %d, want 1", got)
	}
	if got := histCount(t, m, "messaging.process.duration"); got != 3 {
		t.Fatalf("process.duration count = %d, want 3", got)
	}
}

// A message that fails every attempt goes to the error queue: the move is
// on the receive span and counted.
func TestErrorQueueMoveRecorded(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	tr := bus.NewMemoryTransport()
	b := newBus(t, bus.Config{Endpoint: "orders", Transport: tr, Observer: tel.obs,
		Retries: bus.RetryConfig{Immediate: 1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Remind) error { return errFlaky })
	})
	if err := b.Send(ctx, Remind{Order: "o-3"}, bus.To("orders")); err != nil {
		t.Fatal(err)
	}
	recv := tel.waitSpans(t, "receive orders", 1)[0]
	if got := mustAttr(t, recv, "postbus.outcome").AsString(); got != "error_queue" {
		t.Fatalf("outcome %q", got)
	}
	if got := mustAttr(t, recv, "postbus.attempts").AsInt64(); got != 2 {
		t.Fatalf("attempts %d", got)
	}
	var moved bool
	for _, e := range recv.Events() {
		moved = moved || e.Name == "postbus.error_queue"
	}
	if !moved {
		t.Fatalf("no postbus.error_queue event on the receive span: %v", recv.Events())
	}
	m := tel.collect(t)
	if got := sumInt(t, m, "postbus.error_queue.messages"); got != 1 {
		t.Fatalf("postbus.error_queue.messages = %d, want 1", got)
	}
}

// A delayed retry starts a trace of its own, linked to the span that
// scheduled it, which is a child of the failed delivery.
func TestDelayedRetryLinks(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	var calls atomic.Int32
	done := make(chan struct{})
	b := newBus(t, bus.Config{Endpoint: "orders", Clock: clock, Observer: tel.obs,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: 1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Remind) error {
			if calls.Add(1) == 1 {
				return errFlaky
			}
			close(done)
			return nil
		})
	})
	if err := b.Send(ctx, Remind{Order: "o-4"}, bus.To("orders")); err != nil {
		t.Fatal(err)
	}
	first := tel.waitSpans(t, "receive orders", 1)[0]
	if got := mustAttr(t, first, "postbus.outcome").AsString(); got != "retry_later" {
		t.Fatalf("outcome %q", got)
	}
	retrySend := tel.waitSpans(t, "schedule orders", 1)[0]
	if retrySend.Parent().SpanID() != first.SpanContext().SpanID() {
		t.Fatalf("the delayed retry's schedule span should be a child of the failed delivery")
	}
	advanceUntil(t, clock, done)
	second := tel.waitSpans(t, "receive orders", 2)[1]
	if len(second.Links()) != 1 || second.Links()[0].SpanContext.SpanID() != retrySend.SpanContext().SpanID() {
		t.Fatalf("the retry's receive span should link to the span that scheduled the retry: %v", second.Links())
	}
	if second.SpanContext().TraceID() == first.SpanContext().TraceID() {
		t.Fatalf("the delayed retry should start a trace of its own")
	}
	if got := mustAttr(t, second, "postbus.delayed_retries").AsString(); got != "1" {
		t.Fatalf("postbus.delayed_retries %q", got)
	}
}

// The lateness histograms: the fake clock moves 5 s past the due time
// before the dispatcher runs, so dispatch and handling are 5 s late.
func TestLatenessHistogram(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	handled := make(chan struct{})
	b, err := bus.New(bus.Config{Endpoint: "reminders", Clock: clock, Observer: tel.obs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, m Remind) error { close(handled); return nil })
	// Scheduled before Start: no dispatcher runs yet.
	if err := b.Send(ctx, Remind{Order: "o-5"}, bus.To("reminders"), bus.DeliverAfter(time.Minute)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + 5*time.Second)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	<-handled
	tel.waitSpans(t, "receive reminders", 1)
	m := tel.collect(t)
	for _, name := range []string{"postbus.delivery.lateness", "postbus.dispatch.lateness"} {
		h := histogram(t, m, name)
		if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 || h.DataPoints[0].Sum != 5 {
			t.Fatalf("%s: %+v, want one observation of 5 s", name, h.DataPoints)
		}
		dp := h.DataPoints[0]
		if dp.Bounds[0] != 0.001 || dp.Bounds[len(dp.Bounds)-1] != 3600 {
			t.Fatalf("%s: buckets %v, want 1 ms to 1 h", name, dp.Bounds)
		}
		if unit := m[name].Unit; unit != "s" {
			t.Fatalf("%s: unit %q", name, unit)
		}
	}
}

// advanceUntil moves the fake clock a second at a time until done closes.
func advanceUntil(t testing.TB, clock *bustest.FakeClock, done <-chan struct{}) {
	t.Helper()
	for range 2000 {
		select {
		case <-done:
			return
		case <-time.After(5 * time.Millisecond):
			clock.Advance(time.Second)
		}
	}
	t.Fatal("not done after advancing the clock 2000 s")
}

func sumInt(t testing.TB, m map[string]metricdata.Metrics, name string) int64 {
	t.Helper()
	s, ok := m[name].Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: no int64 sum among %d metrics", name, len(m))
	}
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

func histogram(t testing.TB, m map[string]metricdata.Metrics, name string) metricdata.Histogram[float64] {
	t.Helper()
	h, ok := m[name].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: no float64 histogram", name)
	}
	return h
}

func histCount(t testing.TB, m map[string]metricdata.Metrics, name string) uint64 {
	t.Helper()
	var n uint64
	for _, dp := range histogram(t, m, name).DataPoints {
		n += dp.Count
	}
	return n
}

// With DelayedAsChild, one trace runs across the delay: the delivery of a
// delayed message is a child of the span that scheduled it.
func TestDelayedAsChildKeepsOneTrace(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tel := newTelemetry(t)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs, err := otelbus.New(otelbus.Options{TracerProvider: tp, DelayedAsChild: true})
	if err != nil {
		t.Fatal(err)
	}
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	done := make(chan struct{})
	b := newBus(t, bus.Config{Endpoint: "reminders", Clock: clock, Observer: obs}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Remind) error { close(done); return nil })
	})
	if err := b.Send(ctx, Remind{}, bus.To("reminders"), bus.DeliverAfter(time.Minute)); err != nil {
		t.Fatal(err)
	}
	advanceUntil(t, clock, done)
	sched := tel.waitSpans(t, "schedule reminders", 1)[0]
	for _, name := range []string{"dispatch reminders", "receive reminders"} {
		s := tel.waitSpans(t, name, 1)[0]
		if s.Parent().SpanID() != sched.SpanContext().SpanID() || s.SpanContext().TraceID() != sched.SpanContext().TraceID() {
			t.Fatalf("%s is not a child of the scheduling span", name)
		}
	}
}

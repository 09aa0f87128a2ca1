package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]bus.Config{
		"no endpoint":        {},
		"bad char":           {Endpoint: "sales orders"},
		"slash":              {Endpoint: "sales/orders"},
		"too long":           {Endpoint: strings.Repeat("a", 201)},
		"bad error queue":    {Endpoint: "ok", ErrorQueue: "bad queue"},
		"negative conc":      {Endpoint: "ok", Concurrency: -1},
		"negative poll":      {Endpoint: "ok", Dispatcher: bus.DispatcherConfig{PollInterval: -time.Second}},
		"negative batch":     {Endpoint: "ok", Dispatcher: bus.DispatcherConfig{BatchSize: -1}},
		"negative msg limit": {Endpoint: "ok", MaxMessageSize: -1},
	} {
		_, err := bus.New(cfg)
		var ce *bus.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want *ConfigError", name, err)
		}
	}
	if _, err := bus.New(bus.Config{Endpoint: "Sales.orders-v2_eu"}); err != nil {
		t.Errorf("valid endpoint rejected: %v", err)
	}
}

func TestClosedBusReturnsErrClosed(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); !errors.Is(err, bus.ErrAlreadyStarted) {
		t.Errorf("second Start = %v", err)
	}
	if err := b.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	calls := map[string]error{
		"Send":     b.Send(ctxT(t), PlaceOrder{}, bus.To("x")),
		"Publish":  b.Publish(ctxT(t), OrderPlaced{}),
		"Start":    b.Start(ctxT(t)),
		"Handle":   bus.Handle(b, func(context.Context, PlaceOrder) error { return nil }),
		"Route":    bus.Route[PlaceOrder](b, "x"),
		"Receive":  b.Receive(ctxT(t), &bus.Envelope{}),
		"Delayed":  b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.DeliverAfter(time.Hour)),
		"Cancel":   func() error { _, err := b.CancelScheduled(ctxT(t), "x"); return err }(),
		"Conflict": b.Send(ctxT(t), PlaceOrder{}, bus.DeliverAfter(1), bus.DeliverAt(time.Now())),
		"Batch": func() error {
			var batch bus.Batch
			batch.Send(PlaceOrder{}, bus.To("x"))
			return b.SendBatch(ctxT(t), &batch)
		}(),
	}
	for name, err := range calls {
		if !errors.Is(err, bus.ErrClosed) {
			t.Errorf("%s after Stop = %v, want ErrClosed", name, err)
		}
	}
}

func TestSendWithoutRouteFails(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr, SendOnly: true}, nil)
	if err := b.Send(ctxT(t), PlaceOrder{}); !errors.Is(err, bus.ErrNoRoute) {
		t.Fatalf("err = %v, want ErrNoRoute", err)
	}
	if err := b.Publish(ctxT(t), OrderPlaced{}, bus.To("x")); !errors.Is(err, bus.ErrInvalidOption) {
		t.Errorf("Publish with To = %v, want ErrInvalidOption", err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("bad name")); !errors.Is(err, bus.ErrInvalidOption) {
		t.Errorf("To(bad name) = %v, want ErrInvalidOption", err)
	}
}

func TestBadMessages(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "shop", MaxMessageSize: 100, SendOnly: true}, nil)
	for name, msg := range map[string]any{
		"nil":            nil,
		"oversize":       PlaceOrder{ID: strings.Repeat("x", 200)},
		"unserializable": map[string]any{"f": func() {}},
	} {
		if err := b.Send(ctxT(t), msg, bus.To("x")); !errors.Is(err, bus.ErrInvalidMessage) {
			t.Errorf("%s: err = %v, want ErrInvalidMessage", name, err)
		}
	}
	if err := bus.Reply(ctxT(t), PlaceOrder{}); !errors.Is(err, bus.ErrNotInHandler) {
		t.Errorf("Reply outside a handler = %v, want ErrNotInHandler", err)
	}
	if bus.IncomingMessage(ctxT(t)) != nil {
		t.Error("IncomingMessage outside a handler is not nil")
	}
}

func TestMessageName(t *testing.T) {
	t.Parallel()
	if got := bus.MessageName(PlaceOrder{}); got != "github.com/postbus/bus_test.PlaceOrder" {
		t.Errorf("MessageName = %q", got)
	}
	if got := bus.MessageName(&PlaceOrder{}); got != "github.com/postbus/bus_test.PlaceOrder" {
		t.Errorf("MessageName(pointer) = %q", got)
	}
	if got := bus.MessageName(Renamed{}); got != "sales.renamed.v1" {
		t.Errorf("MessageName(Named) = %q", got)
	}
}

func TestHandlerForNamedAndPointerTypes(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	named, ptr := bustest.NewRecorder[Renamed](), bustest.NewRecorder[*PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, named.Handler)
		_ = bus.Handle(b, ptr.Handler)
	})
	if err := b.Send(ctxT(t), Renamed{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), &PlaceOrder{ID: "p"}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	named.WaitFor(t, 1)
	ptr.WaitFor(t, 1)
	if named.Envelopes()[0].Type != "sales.renamed.v1" || ptr.Messages()[0].ID != "p" {
		t.Errorf("got type %q and %+v", named.Envelopes()[0].Type, ptr.Messages()[0])
	}
}

func TestPanickingHandlerGoesToErrorQueue(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{Immediate: 1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { panic("boom") })
	})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "error", 1)
}

func TestUnrecoverableSkipsRetries(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	calls := 0
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return bus.Unrecoverable(errors.New("bad data"))
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "error", 1)
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

func waitLen(t *testing.T, tr *bus.MemoryTransport, queue string, n int) {
	t.Helper()
	drivertest.Eventually(t, 10*time.Second, func() bool { return tr.Len(queue) >= n }, "queue %s to hold %d messages", queue, n)
}

func TestSendOnlyBusNeverReceives(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "client", Transport: tr, SendOnly: true}, nil)
	if err := bus.Handle(b, func(context.Context, PlaceOrder) error { return nil }); !errors.Is(err, bus.ErrInvalidConfig) {
		t.Errorf("Handle on a send-only bus = %v", err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("client")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if tr.Len("client") != 1 {
		t.Errorf("send-only bus consumed its queue")
	}
}

func TestReceiveWithoutStart(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	b, err := bus.New(bus.Config{Endpoint: "lambda", Transport: tr, Persistence: store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	in := bustest.NewRecorder[PlaceOrder]()
	_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		if err := b.Send(ctx, OrderPlaced{ID: m.ID}, bus.To("billing"), bus.DeliverAfter(time.Hour)); err != nil {
			return err
		}
		return in.Handler(ctx, m)
	})
	env := &bus.Envelope{ID: "e1", Type: bus.MessageName(PlaceOrder{}), Kind: bus.KindCommand, Body: []byte(`{"ID":"42"}`),
		CorrelationID: "c1", StickyAttributes: map[string]string{"tenant": "t"}}
	if err := b.Receive(ctxT(t), env); err != nil {
		t.Fatal(err)
	}
	if in.Len() != 1 || in.Messages()[0].ID != "42" || store.Len() != 1 {
		t.Fatalf("handled %v, stored %d", in.Messages(), store.Len())
	}
	if err := b.Receive(ctxT(t), &bus.Envelope{ID: "e2", Type: "unknown"}); err != nil {
		t.Fatalf("unknown message: %v", err)
	}
	if tr.Len("error") != 1 {
		t.Errorf("unknown message not in error queue")
	}
	if err := b.Receive(ctxT(t), nil); !errors.Is(err, bus.ErrInvalidMessage) {
		t.Errorf("Receive(nil) = %v", err)
	}
}

func TestMiddlewareOrderAndOutgoingOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var trace []string
	mark := func(s string) bus.Middleware {
		return func(next bus.PipelineFunc) bus.PipelineFunc {
			return func(ctx context.Context, env *bus.Envelope) error {
				mu.Lock()
				trace = append(trace, s+":"+env.Type[strings.LastIndex(env.Type, ".")+1:])
				mu.Unlock()
				if s == "out1" {
					env.SetHeader("stamped", "yes")
				}
				return next(ctx, env)
			}
		}
	}
	in := bustest.NewRecorder[OrderPlaced]()
	b := bustest.StartBus(t, bus.Config{
		Endpoint: "sales",
		Incoming: []bus.Middleware{mark("in1"), mark("in2")},
		Outgoing: []bus.Middleware{mark("out1"), mark("out2")},
	}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Publish(ctxT(t), OrderPlaced{}, bus.DeliverAfter(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	in.WaitFor(t, 1)
	mu.Lock()
	defer mu.Unlock()
	want := "out1:OrderPlaced out2:OrderPlaced in1:OrderPlaced in2:OrderPlaced"
	if got := strings.Join(trace, " "); got != want {
		t.Errorf("trace = %q, want %q", got, want)
	}
	if in.Envelopes()[0].Header("stamped") != "yes" {
		t.Error("outgoing middleware change lost across the delay")
	}
}

func TestHandlerSendsInheritCorrelationAndSticky(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	out := bustest.NewRecorder[OrderPlaced]()
	bustest.StartBus(t, bus.Config{Endpoint: "billing", Transport: tr}, func(b *bus.Bus) { _ = bus.Handle(b, out.Handler) })
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			return b.Publish(ctx, OrderPlaced{ID: m.ID}, bus.WithStickyAttribute("step", "2"))
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.WithCorrelationID("conv"),
		bus.WithStickyAttribute("tenant", "acme"), bus.WithAttribute("local", "x")); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, 1)
	e := out.Envelopes()[0]
	if e.CorrelationID != "conv" || e.StickyAttributes["tenant"] != "acme" || e.StickyAttributes["step"] != "2" || e.Attributes["local"] != "" {
		t.Errorf("correlation %q sticky %v attributes %v", e.CorrelationID, e.StickyAttributes, e.Attributes)
	}
}

func TestHandlerInFlightDuringStopCanStillSend(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	entered, release := make(chan struct{}), make(chan struct{})
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		close(entered)
		<-release
		return b.Send(ctx, OrderPlaced{ID: m.ID}, bus.To("billing"))
	})
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	<-entered
	stopped := make(chan error)
	go func() { stopped <- b.Stop(ctxT(t)) }()
	time.Sleep(20 * time.Millisecond) // Stop is now waiting for the handler
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if tr.Len("billing") != 1 || tr.Len("sales") != 0 {
		t.Errorf("billing %d, sales %d; want the handler's message sent and its input acknowledged", tr.Len("billing"), tr.Len("sales"))
	}
}

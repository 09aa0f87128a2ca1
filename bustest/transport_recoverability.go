package bustest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

func testErrorQueue(t *testing.T, tr bus.Transport, ns string) {
	var calls atomic.Int64
	c := cfg(tr, ns, "failing")
	c.Retries.Immediate = 2
	c.Retries.Delayed = -1
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, Failing) error { calls.Add(1); return errors.New("always fails") })
	})
	errQ := drainQueue(t, tr, c.ErrorQueue)
	if err := b.Send(ctxFor(t), Failing{N: 1}, bus.To(c.Endpoint), bus.WithMessageID("fail-"+ns), bus.WithHeader("keep", "me")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	errQ.expectExactly(t, 1, 200*time.Millisecond)
	if got := calls.Load(); got != 3 {
		t.Errorf("handler called %d times, want 3 (1 + 2 immediate retries)", got)
	}
	_, envs, _ := errQ.snapshot()
	e := envs[0]
	want := map[string]string{
		bus.HeaderFailureReason: "always fails", bus.HeaderFailureEndpoint: c.Endpoint,
		bus.HeaderFailureQueue: c.Endpoint, bus.HeaderFailureAttempts: "3", bus.HeaderFailureKind: "handler", "keep": "me",
	}
	for k, v := range want {
		if e.Headers[k] != v {
			t.Errorf("error queue header %s = %q, want %q", k, e.Headers[k], v)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, e.Headers[bus.HeaderFailureTime]); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("failure time header %q: %v", e.Headers[bus.HeaderFailureTime], err)
	}
	if e.ID != "fail-"+ns || string(e.Body) != `{"N":1}` || e.Type != bus.MessageName(Failing{}) {
		t.Errorf("error queue changed the message: id %q type %q body %q", e.ID, e.Type, e.Body)
	}
}

func testRetrySucceeds(t *testing.T, tr bus.Transport, ns string) {
	var calls atomic.Int64
	done := NewRecorder[Failing]()
	c := cfg(tr, ns, "flaky")
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Failing) error {
			if calls.Add(1) <= 2 {
				return errors.New("transient")
			}
			return done.Handler(ctx, m)
		})
	})
	errQ := drainQueue(t, tr, c.ErrorQueue)
	if err := b.Send(ctxFor(t), Failing{N: 1}, bus.To(c.Endpoint)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	done.expectExactly(t, 1, 200*time.Millisecond)
	if errQ.Len() != 0 || calls.Load() != 3 {
		t.Errorf("error queue has %d, handler calls %d; want 0 and 3", errQ.Len(), calls.Load())
	}
}

func testPoison(t *testing.T, tr bus.Transport, ns string) {
	good := NewRecorder[Ping]()
	c := cfg(tr, ns, "target")
	StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, good.Handler) })
	errQ := drainQueue(t, tr, c.ErrorQueue)
	poison := []*bus.Envelope{
		{ID: "unknown-" + ns, Type: "bustest.NobodyHandlesThis", Kind: bus.KindCommand, Body: []byte(`{}`), ContentType: "application/json", Destination: c.Endpoint},
		{ID: "garbage-" + ns, Type: bus.MessageName(Ping{}), Kind: bus.KindCommand, Body: []byte(`{not json`), ContentType: "application/json", Destination: c.Endpoint},
	}
	for _, p := range poison {
		if err := tr.Send(ctxFor(t), c.Endpoint, p); err != nil {
			t.Fatalf("transport Send: %v", err)
		}
	}
	sender := StartBus(t, cfg(tr, ns, "sender"), nil)
	if err := sender.Send(ctxFor(t), Ping{N: 1}, bus.To(c.Endpoint)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	good.expectExactly(t, 1, 0)
	errQ.expectExactly(t, 2, 200*time.Millisecond)
	_, envs, _ := errQ.snapshot()
	for _, e := range envs {
		if e.Headers[bus.HeaderFailureKind] != "poison" || e.Headers[bus.HeaderFailureReason] == "" {
			t.Errorf("poison message %s headers %v, want kind poison and a reason", e.ID, e.Headers)
		}
	}
}

func testFailedHandlerSendsNothing(t *testing.T, tr bus.Transport, ns string) {
	out := NewRecorder[Pong]()
	StartBus(t, cfg(tr, ns, "downstream"), func(b *bus.Bus) { _ = bus.Handle(b, out.Handler) })
	c := cfg(tr, ns, "upstream")
	c.Retries.Immediate = -1
	c.Retries.Delayed = -1
	errQ := drainQueue(t, tr, c.ErrorQueue)
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Route[Pong](b, ns+"-downstream")
		_ = bus.Handle(b, func(ctx context.Context, m Ping) error {
			if err := b.Send(ctx, Pong{N: m.N}); err != nil {
				return err
			}
			if err := b.Send(ctx, Pong{N: m.N + 100}, bus.DeliverAfter(50*time.Millisecond)); err != nil {
				return err
			}
			if m.N%2 == 1 {
				return errors.New("odd numbers fail after sending")
			}
			return nil
		})
	})
	for i := range 4 {
		if err := b.Send(ctxFor(t), Ping{N: i}, bus.To(c.Endpoint)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	out.expectExactly(t, 4, 300*time.Millisecond)
	errQ.expectExactly(t, 2, 0) // the odd ones
	got, _, _ := out.snapshot()
	want := map[int]bool{0: true, 2: true, 100: true, 102: true}
	for _, p := range got {
		if !want[p.N] {
			t.Errorf("failed handler's message %d was sent", p.N)
		}
	}
}

func testDelayedRetries(t *testing.T, tr bus.Transport, ns string) {
	var calls atomic.Int64
	c := cfg(tr, ns, "failing")
	c.Persistence = durableMemory{bus.NewMemoryPersistence()} // delayed retries need a durable store with a broker
	c.Retries = bus.RetryConfig{Immediate: -1, Delayed: 2, DelayedBackoff: func(int) time.Duration { return 50 * time.Millisecond }}
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, Failing) error { calls.Add(1); return errors.New("still failing") })
	})
	errQ := drainQueue(t, tr, c.ErrorQueue)
	if err := b.Send(ctxFor(t), Failing{N: 2}, bus.To(c.Endpoint), bus.WithMessageID("dr-"+ns), bus.WithHeader("keep", "me")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	errQ.expectExactly(t, 1, 300*time.Millisecond)
	if got := calls.Load(); got != 3 {
		t.Errorf("handler called %d times, want 3 (1 + 2 delayed retries)", got)
	}
	_, envs, _ := errQ.snapshot()
	e := envs[0]
	if e.ID != "dr-"+ns || string(e.Body) != `{"N":2}` || e.Headers["keep"] != "me" || e.Headers[bus.HeaderDelayedRetries] != "2" {
		t.Errorf("error queue copy: id %q body %q headers %v", e.ID, e.Body, e.Headers)
	}
}

func (o *outage) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if o.down.Load() && queue == o.queue {
		return errors.New("injected outage")
	}
	return o.Transport.Send(ctx, queue, env)
}

// durableMemory is an in-memory store that says it is durable, so the
// suite can exercise delayed retries over a broker transport without a
// database. Only for tests: it loses everything on restart.
type durableMemory struct{ *bus.MemoryPersistence }

func (durableMemory) Durable() bool { return true }

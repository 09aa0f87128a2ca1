package bus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// recordingObserver records the calls it receives and marks each step's
// ctx, so tests see what the bus passes on.
type recordingObserver struct {
	mu     sync.Mutex
	calls  []string
	events []bus.ObserverEvent
	ends   []bus.ReceiveEnd
}

type stepKey struct{}

func (r *recordingObserver) add(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recordingObserver) StartSend(ctx context.Context, info bus.SendStart) context.Context {
	info.Envelope.SetHeader("x-trace", "from-send")
	r.add("StartSend")
	return context.WithValue(ctx, stepKey{}, "send")
}

func (r *recordingObserver) EndSend(ctx context.Context, info bus.SendEnd) {
	if ctx.Value(stepKey{}) != "send" {
		panic("EndSend without StartSend's ctx")
	}
	r.add("EndSend")
}

func (r *recordingObserver) StartDispatch(ctx context.Context, info bus.DispatchStart) context.Context {
	r.add("StartDispatch")
	return ctx
}

func (r *recordingObserver) EndDispatch(ctx context.Context, info bus.DispatchEnd) {
	r.add("EndDispatch")
}

func (r *recordingObserver) StartReceive(ctx context.Context, info bus.ReceiveStart) context.Context {
	r.add("StartReceive")
	return ctx
}

func (r *recordingObserver) EndReceive(ctx context.Context, info bus.ReceiveEnd) {
	r.mu.Lock()
	r.ends = append(r.ends, info)
	r.mu.Unlock()
	r.add("EndReceive")
}

func (r *recordingObserver) StartAttempt(ctx context.Context, info bus.AttemptStart) context.Context {
	r.add("StartAttempt")
	return context.WithValue(ctx, stepKey{}, "attempt")
}

func (r *recordingObserver) EndAttempt(ctx context.Context, info bus.AttemptEnd) { r.add("EndAttempt") }

func (r *recordingObserver) Event(ctx context.Context, ev bus.ObserverEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	r.add("Event:" + ev.Kind.String())
}

func (r *recordingObserver) snapshot() ([]string, []bus.ObserverEvent, []bus.ReceiveEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.events), slices.Clone(r.ends)
}

// The observer sees a scheduled message from its send to its handling; a
// header it sets when the message is sent reaches the handler through the
// store, and the ctx of an attempt is the handler's.
func TestObserverFollowsAScheduledMessage(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	type seen struct{ header, step string }
	got := make(chan seen, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Clock: clock, Observer: obs}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			s, _ := ctx.Value(stepKey{}).(string)
			got <- seen{bus.IncomingMessage(ctx).Header("x-trace"), s}
			return nil
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(time.Second)); err != nil {
		t.Fatal(err)
	}
	var s seen
	for done := false; !done; {
		select {
		case s = <-got:
			done = true
		case <-time.After(5 * time.Millisecond):
			clock.Advance(time.Second)
		}
	}
	if s.header != "from-send" || s.step != "attempt" {
		t.Fatalf("handler saw header %q and step %q", s.header, s.step)
	}
	drivertest.Eventually(t, 10*time.Second, func() bool {
		calls, _, _ := obs.snapshot()
		return slices.Contains(calls, "EndReceive") && slices.Contains(calls, "Event:settle")
	}, "the end of the delivery and the settling of the row")
	calls, events, ends := obs.snapshot()
	for _, want := range []string{"StartSend", "EndSend", "Event:claim", "StartDispatch", "EndDispatch", "StartReceive", "StartAttempt", "EndAttempt"} {
		if !slices.Contains(calls, want) {
			t.Fatalf("no %s among %v", want, calls)
		}
	}
	if ends[0].Outcome != bus.OutcomeHandled || ends[0].Attempts != 1 {
		t.Fatalf("receive ended %+v", ends[0])
	}
	for _, ev := range events {
		if ev.Kind == bus.EventClaim && ev.Count != 1 {
			t.Fatalf("claim event %+v", ev)
		}
	}
}

// A handler that always fails: the observer sees each retry, the move to
// the error queue and that outcome.
func TestObserverSeesRetriesAndTheErrorQueue(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Observer: obs, Logger: quiet(),
		Retries: bus.RetryConfig{Immediate: 2, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error { return errors.New("boom") })
	})
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	drivertest.Eventually(t, 10*time.Second, func() bool { _, _, ends := obs.snapshot(); return len(ends) >= 1 }, "the end of the delivery")
	_, events, ends := obs.snapshot()
	if len(ends) != 1 || ends[0].Outcome != bus.OutcomeErrorQueue || ends[0].Attempts != 3 {
		t.Fatalf("receive ended %+v", ends)
	}
	var retries, moved int
	for _, ev := range events {
		switch ev.Kind {
		case bus.EventRetry:
			retries++
		case bus.EventErrorQueue:
			moved++
			if ev.Reason != "handler" || ev.Attempt != 3 {
				t.Fatalf("error-queue event %+v", ev)
			}
		}
	}
	if retries != 2 || moved != 1 {
		t.Fatalf("%d retries and %d moves, want 2 and 1", retries, moved)
	}
}

// A breaker that trips and recovers is reported open, then closed.
func TestObserverSeesBreakers(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	store := &failingStore{MemoryPersistence: bus.NewMemoryPersistence()}
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: store, Observer: obs, Logger: quiet(), Clock: clock,
		CircuitBreakers: bus.CircuitBreakerConfig{Store: 50 * time.Millisecond}, OnCriticalError: func(error) {}}, nil)
	store.down.Store(true)
	for range 3 {
		_ = b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(time.Minute))
		clock.Advance(30 * time.Millisecond)
	}
	store.down.Store(false)
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var states []bool
	_, events, _ := obs.snapshot()
	for _, ev := range events {
		if ev.Kind == bus.EventBreaker && ev.Reason == "store" {
			states = append(states, ev.Open)
		}
	}
	if !slices.Equal(states, []bool{true, false}) {
		t.Fatalf("store breaker states %v, want open then closed", states)
	}
}

// countEvents returns how many events of kind obs has seen.
func (r *recordingObserver) countEvents(kind bus.EventKind) int {
	_, events, _ := r.snapshot()
	n := 0
	for _, ev := range events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// lookSince returns the first claim (EventClaim or EventClaimEmpty) that
// started at or after at, if there is one yet.
func (r *recordingObserver) lookSince(at time.Time) (bus.ObserverEvent, bool) {
	_, events, _ := r.snapshot()
	for _, ev := range events {
		if (ev.Kind == bus.EventClaim || ev.Kind == bus.EventClaimEmpty) && !ev.Start.Before(at) {
			return ev, true
		}
	}
	return bus.ObserverEvent{}, false
}

// waitLook waits until the dispatcher observed by r has looked at the
// store and found nothing, at least n times in all (EventClaimEmpty): the
// sign that a look the test asked for (a poke, an advanced clock) is over.
func (r *recordingObserver) waitLook(t *testing.T, n int) {
	t.Helper()
	drivertest.Eventually(t, 10*time.Second, func() bool { return r.countEvents(bus.EventClaimEmpty) >= n },
		"the dispatcher to report %d empty claims", n)
}

// A claim that finds nothing is reported as EventClaimEmpty, by the plain
// dispatcher and by the look-ahead one, each time the dispatcher looks;
// a claim that takes a row stays EventClaim.
func TestObserverSeesClaimsThatFindNothing(t *testing.T) {
	t.Parallel()
	for name, lookAhead := range map[string]time.Duration{"plain": -1, "look-ahead": 0} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := &recordingObserver{}
			t0 := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
			clock := bustest.NewFakeClock(t0)
			in := bustest.NewRecorder[PlaceOrder]()
			b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Clock: clock, Observer: obs,
				Dispatcher: bus.DispatcherConfig{PollInterval: time.Second, LookAhead: lookAhead}},
				func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
			obs.waitLook(t, 1)
			// Each poll interval is one more look.
			drivertest.Eventually(t, 10*time.Second, func() bool {
				if obs.countEvents(bus.EventClaimEmpty) >= 3 {
					return true
				}
				clock.Advance(time.Second)
				return false
			}, "three empty claims")
			_, events, _ := obs.snapshot()
			for _, ev := range events {
				if ev.Kind == bus.EventClaimEmpty && (ev.Count != 0 || ev.Endpoint != "sales" || ev.Start.IsZero() || ev.Time.Before(ev.Start)) {
					t.Fatalf("empty claim event %+v", ev)
				}
			}
			if n := obs.countEvents(bus.EventClaim); n != 0 {
				t.Fatalf("%d claim events with no row stored", n)
			}
			must(t, b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(time.Second)))
			drivertest.Eventually(t, 10*time.Second, func() bool {
				if in.Len() > 0 {
					return true
				}
				clock.Advance(100 * time.Millisecond)
				return false
			}, "the row to be delivered")
			if got := claimEvents(obs); !slices.Equal(got, []int{1}) {
				t.Fatalf("claims of %v rows, want one of 1", got)
			}
			if bus.EventClaimEmpty.String() != "claim_empty" {
				t.Fatalf("kind named %q", bus.EventClaimEmpty)
			}
		})
	}
}

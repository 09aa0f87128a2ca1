package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

type (
	OrderState struct {
		ID      string
		Placed  int
		Paid    bool
		Counted []int
	}
	SagaStart struct{ OrderID string }
	SagaPay   struct{ OrderID string }
	SagaCount struct {
		OrderID string
		N       int
	}
	PaymentOverdue struct{ Note string }
	Counted        struct {
		OrderID string
		N       int
	}
)

// timeoutRun is what a timeout handler saw.
type timeoutRun struct {
	state OrderState
	msg   PaymentOverdue
}

// orderSaga registers the order saga used by these tests on b: a start that
// asks for a 24 h payment timeout, a payment that completes it, and the
// timeout handler, which records what it saw.
func orderSaga(t *testing.T, b *bus.Bus, timeouts chan<- timeoutRun) {
	t.Helper()
	s := bus.NewSaga[OrderState](b, "order")
	must(t, bus.SagaStartedBy(s, func(m SagaStart) string { return m.OrderID },
		func(ctx context.Context, st *OrderState, m SagaStart) error {
			st.ID = m.OrderID
			st.Placed++
			return bus.RequestTimeout(ctx, PaymentOverdue{Note: "pay " + m.OrderID}, 24*time.Hour)
		}))
	must(t, bus.SagaHandle(s, func(m SagaPay) string { return m.OrderID },
		func(ctx context.Context, st *OrderState, m SagaPay) error {
			st.Paid = true
			bus.CompleteSaga(ctx)
			return nil
		}))
	must(t, bus.SagaTimeout(s, func(ctx context.Context, st *OrderState, m PaymentOverdue) error {
		timeouts <- timeoutRun{*st, m}
		return nil
	}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// advanceDay walks the fake clock a day forward in hour steps, letting the
// dispatcher look at the store as it wakes.
func advanceDay(t *testing.T, clock *bustest.FakeClock) {
	for range 24 {
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(time.Hour)
	}
}

func TestSagaTimeoutAfter24HoursWithFakeClock(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	store := bus.NewMemoryPersistence()
	timeouts := make(chan timeoutRun, 10)
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Persistence: store, Clock: clock, Logger: quiet()},
		func(b *bus.Bus) { orderSaga(t, b, timeouts) })
	must(t, b.Send(ctxT(t), SagaStart{OrderID: "o-1"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool {
		inst, ok, _ := store.LoadSaga(ctxT(t), "order", "o-1")
		return ok && len(inst.Timeouts) == 1 && store.Len() == 1
	}, "the saga to start and store its timeout")
	clock.WaitForTimers(ctxT(t), 1)
	clock.Advance(24*time.Hour - time.Minute)
	clock.WaitForTimers(ctxT(t), 1)
	select {
	case r := <-timeouts:
		t.Fatalf("timeout ran a minute early: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(time.Minute)
	select {
	case r := <-timeouts:
		if r.state.ID != "o-1" || r.state.Placed != 1 || r.msg.Note != "pay o-1" {
			t.Fatalf("timeout ran with %+v, want the stored state of o-1", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout never ran")
	}
	drivertest.Eventually(t, 15*time.Second, func() bool {
		inst, ok, _ := store.LoadSaga(ctxT(t), "order", "o-1")
		return ok && len(inst.Timeouts) == 0 && inst.Version == 2
	}, "the fired timeout to leave the instance's pending list")
	advanceDay(t, clock)
	select {
	case r := <-timeouts:
		t.Fatalf("the timeout ran twice: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestSagaCompletionCancelsTimeouts(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	store := bus.NewMemoryPersistence()
	timeouts := make(chan timeoutRun, 10)
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Persistence: store, Clock: clock, Logger: quiet()},
		func(b *bus.Bus) { orderSaga(t, b, timeouts) })
	must(t, b.Send(ctxT(t), SagaStart{OrderID: "o-2"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool { return store.Len() == 1 }, "the timeout to be stored")
	must(t, b.Send(ctxT(t), SagaPay{OrderID: "o-2"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool {
		_, ok, _ := store.LoadSaga(ctxT(t), "order", "o-2")
		return !ok && store.Len() == 0
	}, "completion to delete the state and cancel the timeout")
	advanceDay(t, clock)
	advanceDay(t, clock)
	select {
	case r := <-timeouts:
		t.Fatalf("a completed saga's timeout ran: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	if h := b.Metrics().Handled; h != 2 {
		t.Errorf("handled %d messages, want the start and the payment only", h)
	}
}

// A timeout whose instance completed, and whose correlation value started a
// new instance since, is dropped: it belongs to the old one.
func TestSagaTimeoutOfCompletedInstanceIsDropped(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	timeouts := make(chan timeoutRun, 10)
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Persistence: store, Logger: quiet()},
		func(b *bus.Bus) { orderSaga(t, b, timeouts) })
	must(t, b.Send(ctxT(t), SagaStart{OrderID: "o-3"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool { _, ok, _ := store.LoadSaga(ctxT(t), "order", "o-3"); return ok }, "the first instance")
	first, _, _ := store.LoadSaga(ctxT(t), "order", "o-3")
	must(t, b.Send(ctxT(t), SagaPay{OrderID: "o-3"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool { _, ok, _ := store.LoadSaga(ctxT(t), "order", "o-3"); return !ok }, "completion")
	must(t, b.Send(ctxT(t), SagaStart{OrderID: "o-3"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool { _, ok, _ := store.LoadSaga(ctxT(t), "order", "o-3"); return ok }, "the second instance")
	second, _, _ := store.LoadSaga(ctxT(t), "order", "o-3")
	if second.ID == first.ID {
		t.Fatal("the restarted instance has the completed one's ID")
	}
	// The first instance's timeout arrives late (a dispatcher held it while
	// the saga completed).
	env := &bus.Envelope{ID: first.Timeouts[0], Type: bus.MessageName(PaymentOverdue{}), Kind: bus.KindCommand,
		Body: []byte(`{"Note":"late"}`), ContentType: "application/json", Destination: "orders",
		Headers: map[string]string{bus.HeaderSaga: "order", bus.HeaderSagaCorrelation: "o-3", bus.HeaderSagaInstance: first.ID}}
	before := b.Metrics().SagaNotFound
	must(t, b.Receive(ctxT(t), env))
	if got := b.Metrics().SagaNotFound; got != before+1 {
		t.Errorf("SagaNotFound went from %d to %d, want one more", before, got)
	}
	select {
	case r := <-timeouts:
		t.Fatalf("the old instance's timeout ran on the new one: %+v", r)
	default:
	}
	if now, _, _ := store.LoadSaga(ctxT(t), "order", "o-3"); now.Version != second.Version {
		t.Errorf("the new instance changed: version %d, was %d", now.Version, second.Version)
	}
}

func TestSagaMessageWithoutInstanceIsCountedAndAcknowledged(t *testing.T) {
	t.Parallel()
	store, tr := bus.NewMemoryPersistence(), bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Transport: tr, Persistence: store, Logger: quiet()},
		func(b *bus.Bus) { orderSaga(t, b, make(chan timeoutRun, 1)) })
	must(t, b.Send(ctxT(t), SagaPay{OrderID: "never-started"}, bus.To("orders")))
	drivertest.Eventually(t, 15*time.Second, func() bool { return b.Metrics().SagaNotFound == 1 && b.Metrics().Handled == 1 }, "the payment to be acknowledged")
	if _, ok, _ := store.LoadSaga(ctxT(t), "order", "never-started"); ok {
		t.Error("a SagaHandle message created an instance")
	}
	if n := tr.Len("error"); n != 0 {
		t.Errorf("%d messages in the error queue, want 0", n)
	}
}

// Fifty messages for one instance at once, handled 16 at a time with no
// retries at all: every one is counted once, conflicts are run again at
// once, and what a losing run sent is never sent.
func TestSagaConcurrentMessagesLoseNoUpdate(t *testing.T) {
	t.Parallel()
	const n = 50
	store, tr := bus.NewMemoryPersistence(), bus.NewMemoryTransport()
	var runs atomic.Int64
	sent := bustest.NewRecorder[Counted]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "counter", Transport: tr, Persistence: store, Concurrency: 16,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}, Logger: quiet()},
		func(b *bus.Bus) {
			s := bus.NewSaga[OrderState](b, "count")
			must(t, bus.SagaStartedBy(s, func(m SagaCount) string { return m.OrderID },
				func(ctx context.Context, st *OrderState, m SagaCount) error {
					runs.Add(1)
					time.Sleep(time.Millisecond) // widen the race window
					st.Counted = append(st.Counted, m.N)
					return b.Send(ctx, Counted(m), bus.To("counter"))
				}))
			must(t, bus.Handle(b, sent.Handler))
		})
	for i := range n {
		must(t, b.Send(ctxT(t), SagaCount{OrderID: "one", N: i}, bus.To("counter")))
	}
	sent.WaitFor(t, n)
	time.Sleep(100 * time.Millisecond)
	inst, ok, err := store.LoadSaga(ctxT(t), "count", "one")
	if err != nil || !ok {
		t.Fatalf("LoadSaga: %v %v", ok, err)
	}
	var st struct{ Counted []int }
	mustJSON(t, inst.State, &st)
	seen := map[int]int{}
	for _, c := range st.Counted {
		seen[c]++
	}
	for i := range n {
		if seen[i] != 1 {
			t.Fatalf("message %d counted %d times in %v", i, seen[i], st.Counted)
		}
	}
	if got := sent.Len(); got != n {
		t.Errorf("%d Counted messages sent, want %d: a losing run's sends leaked", got, n)
	}
	m := b.Metrics()
	if m.MovedToError != 0 || m.Retried != 0 || int64(m.SagaConflicts) != runs.Load()-n {
		t.Errorf("metrics %+v with %d runs: want no error, no retry, a conflict per extra run", m, runs.Load())
	}
	t.Logf("%d runs for %d messages, %d conflicts", runs.Load(), n, m.SagaConflicts)
}

func TestSagaRegistrationErrors(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{Endpoint: "orders", Logger: quiet()})
	must(t, err)
	s := bus.NewSaga[OrderState](b, "order")
	must(t, bus.SagaStartedBy(s, func(m SagaStart) string { return m.OrderID }, func(context.Context, *OrderState, SagaStart) error { return nil }))
	for name, err := range map[string]error{
		"type twice":     bus.SagaHandle(s, func(m SagaStart) string { return m.OrderID }, func(context.Context, *OrderState, SagaStart) error { return nil }),
		"no correlation": bus.SagaStartedBy[OrderState, SagaPay](s, nil, func(context.Context, *OrderState, SagaPay) error { return nil }),
		"nil handler":    bus.SagaTimeout[OrderState, PaymentOverdue](s, nil),
		"bad name":       bus.SagaTimeout(bus.NewSaga[OrderState](b, "order/v1"), func(context.Context, *OrderState, PaymentOverdue) error { return nil }),
		"pointer state":  bus.SagaTimeout(bus.NewSaga[*OrderState](b, "ptr"), func(context.Context, **OrderState, PaymentOverdue) error { return nil }),
	} {
		if !errors.Is(err, bus.ErrInvalidRegistration) && !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidRegistration or ErrInvalidConfig", name, err)
		}
	}
	noSagas, err := bus.New(bus.Config{Endpoint: "orders", Persistence: plainPersistence{}, Logger: quiet()})
	must(t, err)
	err = bus.SagaTimeout(bus.NewSaga[OrderState](noSagas, "order"), func(context.Context, *OrderState, PaymentOverdue) error { return nil })
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Persistence" {
		t.Errorf("saga on a persistence without SagaStore: err = %v, want a *ConfigError on Persistence", err)
	}
}

func TestRequestTimeoutOutsideASagaOrOfAnUnregisteredType(t *testing.T) {
	t.Parallel()
	if err := bus.RequestTimeout(context.Background(), PaymentOverdue{}, time.Hour); !errors.Is(err, bus.ErrNotInHandler) {
		t.Errorf("outside a handler: err = %v, want ErrNotInHandler", err)
	}
	got := make(chan error, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Logger: quiet()}, func(b *bus.Bus) {
		s := bus.NewSaga[OrderState](b, "order")
		must(t, bus.SagaStartedBy(s, func(m SagaStart) string { return m.OrderID },
			func(ctx context.Context, st *OrderState, m SagaStart) error {
				got <- bus.RequestTimeout(ctx, Counted{}, time.Hour)
				return nil
			}))
	})
	must(t, b.Send(ctxT(t), SagaStart{OrderID: "x"}, bus.To("orders")))
	if err := <-got; !errors.Is(err, bus.ErrInvalidMessage) {
		t.Errorf("timeout type without SagaTimeout: err = %v, want ErrInvalidMessage", err)
	}
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

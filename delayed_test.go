package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

func TestDelayedNotBeforeDueWithFakeClock(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Walk the clock to one millisecond before due, letting the dispatcher
	// look at the store each time it wakes.
	for range 599 {
		if !clock.WaitForTimers(ctxT(t), 1) {
			t.Fatal("dispatcher never went to sleep")
		}
		clock.Advance(time.Second)
	}
	clock.WaitForTimers(ctxT(t), 1)
	clock.Advance(time.Second - time.Millisecond)
	clock.WaitForTimers(ctxT(t), 1)
	if n := in.Len(); n != 0 || store.Len() != 1 {
		t.Fatalf("at due-1ms: %d delivered, %d stored; want 0 and 1", n, store.Len())
	}
	clock.Advance(time.Millisecond)
	in.WaitFor(t, 1)
	if due := in.Envelopes()[0].DueAt; !due.Equal(time.Date(2030, 1, 1, 12, 10, 0, 0, time.UTC)) {
		t.Errorf("DueAt = %v", due)
	}
}

func TestDelayedDeliveredWithin100msOfDue(t *testing.T) {
	t.Parallel()
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales"}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	due := time.Now().Add(300 * time.Millisecond)
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAt(due)); err != nil {
		t.Fatal(err)
	}
	in.WaitFor(t, 1)
	late := in.Times()[0].Sub(due)
	if late < 0 || late > 100*time.Millisecond {
		t.Errorf("delivered %v after due, want within [0, 100ms]", late)
	}
}

func TestConflictingDeliveryStoresAndSendsNothing(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, SendOnly: true}, nil)
	err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), bus.DeliverAfter(time.Minute), bus.DeliverAt(time.Now().Add(time.Hour)))
	if !errors.Is(err, bus.ErrConflictingDelivery) {
		t.Fatalf("err = %v, want ErrConflictingDelivery", err)
	}
	err = b.Publish(ctxT(t), OrderPlaced{}, bus.DeliverAt(time.Now().Add(time.Hour)), bus.DeliverAfter(time.Minute))
	if !errors.Is(err, bus.ErrConflictingDelivery) {
		t.Fatalf("Publish err = %v, want ErrConflictingDelivery", err)
	}
	if store.Len() != 0 || tr.Len("billing") != 0 {
		t.Errorf("stored %d, sent %d; want nothing", store.Len(), tr.Len("billing"))
	}
}

// TestConflictingDeliveryIsAnOptionError: both delays are a bad option like
// any other (the guide promises an *OptionError for every bad option), and
// still match ErrConflictingDelivery.
func TestConflictingDeliveryIsAnOptionError(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", SendOnly: true}, nil)
	err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), bus.DeliverAfter(time.Minute), bus.DeliverAt(time.Now().Add(time.Hour)))
	var oe *bus.OptionError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %T %v, want an *OptionError", err, err)
	}
	if oe.Option != "DeliverAt" || oe.Reason == "" {
		t.Errorf("OptionError = %+v, want Option DeliverAt and a reason", oe)
	}
	if !errors.Is(err, bus.ErrConflictingDelivery) || !errors.Is(err, bus.ErrInvalidOption) {
		t.Errorf("err = %v: Is(ErrConflictingDelivery) %v, Is(ErrInvalidOption) %v; want both", err,
			errors.Is(err, bus.ErrConflictingDelivery), errors.Is(err, bus.ErrInvalidOption))
	}
	var be *bus.BatchError
	var bt bus.Batch
	bt.Send(PlaceOrder{}, bus.To("billing"), bus.DeliverAt(time.Now().Add(time.Hour)), bus.DeliverAfter(time.Minute))
	if err := b.SendBatch(ctxT(t), &bt); !errors.As(err, &be) || !errors.As(err, &oe) || !errors.Is(err, bus.ErrConflictingDelivery) {
		t.Errorf("SendBatch err = %v, want a *BatchError around an *OptionError matching ErrConflictingDelivery", err)
	}
}

func TestInvalidDelays(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", SendOnly: true}, nil)
	for name, opt := range map[string]bus.Option{
		"negative":      bus.DeliverAfter(-time.Second),
		"beyond max":    bus.DeliverAfter(bus.MaxDelay + time.Hour),
		"at beyond max": bus.DeliverAt(time.Now().Add(bus.MaxDelay + time.Hour)),
		"zero time":     bus.DeliverAt(time.Time{}),
	} {
		err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), opt)
		var oe *bus.OptionError
		if !errors.As(err, &oe) || !errors.Is(err, bus.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want *OptionError", name, err)
		}
	}
}

func TestDueTimeInThePastSendsAtOnce(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, SendOnly: true}, nil)
	for _, opt := range []bus.Option{bus.DeliverAt(time.Now().Add(-time.Hour)), bus.DeliverAfter(0)} {
		if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), opt); err != nil {
			t.Fatal(err)
		}
	}
	if store.Len() != 0 || tr.Len("billing") != 2 {
		t.Errorf("stored %d, sent %d; want 0 and 2", store.Len(), tr.Len("billing"))
	}
}

// plainPersistence has no ScheduledStore.
type plainPersistence struct{}

func (plainPersistence) Durable() bool { return true }

func TestDelayedDeliveryNotSupported(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: plainPersistence{}, SendOnly: true}, nil)
	err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), bus.DeliverAfter(time.Minute))
	var nse *bus.DelayedDeliveryNotSupportedError
	if !errors.As(err, &nse) || !errors.Is(err, bus.ErrDelayedDeliveryNotSupported) {
		t.Fatalf("err = %v, want *DelayedDeliveryNotSupportedError", err)
	}
	if !strings.Contains(err.Error(), "plainPersistence") || !strings.Contains(err.Error(), "ScheduledStore") {
		t.Errorf("error does not name the persistence and the fix: %v", err)
	}
	if tr.Len("billing") != 0 {
		t.Error("message was sent at once instead of failing")
	}
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing")); err != nil {
		t.Errorf("immediate send on a plain persistence: %v", err)
	}
}

// durableMemory is a memory store that claims durability, to check the
// warning is not logged for durable stores.
type durableMemory struct{ *bus.MemoryPersistence }

func (durableMemory) Durable() bool { return true }

func TestNonDurableWarningOncePerBus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		p     bus.Persistence
		warns int
	}{
		{"memory", bus.NewMemoryPersistence(), 1},
		{"durable", durableMemory{bus.NewMemoryPersistence()}, 0},
	} {
		var logs logBuffer
		b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: tc.p, Logger: logs.logger(), SendOnly: true}, nil)
		for range 2 {
			if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.DeliverAfter(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Count(logs.String(), "lost on restart"); got != tc.warns {
			t.Errorf("%s: %d warnings, want %d; logs:\n%s", tc.name, got, tc.warns, logs.String())
		}
		if tc.warns == 1 && !strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("warning not at Warn level: %s", logs.String())
		}
	}
}

func TestFailingHandlerSchedulesNothing(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	tr := bus.NewMemoryTransport()
	handled := make(chan struct{}, 10)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Retries: bus.RetryConfig{Immediate: 2, Delayed: -1}},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
				defer func() { handled <- struct{}{} }()
				if err := b.Send(ctx, OrderPlaced{}, bus.To("billing"), bus.DeliverAfter(time.Hour)); err != nil {
					return err
				}
				return errors.New("fails after scheduling")
			})
		})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-handled
	}
	drivertest.Eventually(t, 10*time.Second, func() bool { return tr.Len("error") > 0 }, "the message in the error queue")
	if store.Len() != 0 || tr.Len("error") != 1 {
		t.Errorf("stored %d rows, error queue %d; want 0 and 1", store.Len(), tr.Len("error"))
	}
}

func TestStopThenNewBusOnSamePersistenceDeliversPending(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	first, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(400 * time.Millisecond)
	for i := range 5 {
		if err := first.Send(ctxT(t), PlaceOrder{ID: string(rune('a' + i))}, bus.To("sales"), bus.DeliverAt(due)); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := first.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("Send after Stop = %v, want ErrClosed", err)
	}
	in := bustest.NewRecorder[PlaceOrder]()
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	in.WaitFor(t, 5)
	for _, at := range in.Times() {
		if at.Before(due) {
			t.Errorf("delivered %v early", due.Sub(at))
		}
	}
}

func TestCancelScheduled(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: store, SendOnly: true}, nil)
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.DeliverAfter(time.Hour), bus.WithMessageID("m-1")); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.CancelScheduled(ctxT(t), "m-1"); !ok || err != nil {
		t.Fatalf("CancelScheduled = %v, %v; want true", ok, err)
	}
	if ok, err := b.CancelScheduled(ctxT(t), "m-1"); ok || err != nil {
		t.Fatalf("second CancelScheduled = %v, %v; want false", ok, err)
	}
	if store.Len() != 0 {
		t.Errorf("%d rows left", store.Len())
	}
}

func TestSendOnlyBusSchedulesAndAnotherBusDispatches(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	in := bustest.NewRecorder[PlaceOrder]()
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	client := bustest.StartBus(t, bus.Config{Endpoint: "client", Transport: tr, Persistence: store, SendOnly: true}, nil)
	due := time.Now().Add(150 * time.Millisecond)
	if err := client.Send(ctxT(t), PlaceOrder{ID: "x"}, bus.To("sales"), bus.DeliverAt(due)); err != nil {
		t.Fatal(err)
	}
	in.WaitFor(t, 1)
	// Woken through the store's DueNotifier, not the 1 s poll.
	if late := in.Times()[0].Sub(due); late < 0 || late > 100*time.Millisecond {
		t.Errorf("delivered %v after due, want within [0, 100ms]", late)
	}
}

func TestMetricsLatenessOfDelayedMessages(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Clock: clock, Logger: quiet()},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "now"}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	in.WaitFor(t, 1)
	clock.WaitForTimers(ctxT(t), 1)
	clock.Advance(time.Minute + 5*time.Second) // the dispatcher wakes 5 s after due
	in.WaitFor(t, 2)
	if m := b.Metrics(); m.LatenessP50 != 5*time.Second || m.LatenessP99 != 5*time.Second {
		t.Errorf("lateness p50 %v p99 %v, want 5s from the one delayed message", m.LatenessP50, m.LatenessP99)
	}
}

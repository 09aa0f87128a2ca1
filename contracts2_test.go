package bus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

func TestReplayStopsWhenReplayedMessagesFailAgain(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	var calls atomic.Int64
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: mem,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { calls.Add(1); return errors.New("poison") })
	})
	for i := range 5 {
		if err := b.Send(ctxT(t), PlaceOrder{ID: string(rune('a' + i))}, bus.To("sales")); err != nil {
			t.Fatal(err)
		}
	}
	waitLen(t, mem, "error", 5)
	done := make(chan struct{})
	var moved int
	var err error
	go func() {
		defer close(done)
		moved, err = b.Replay(ctxT(t), bus.ReplayOptions{IdleTimeout: 2 * time.Second})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Replay still running after 20 s while its messages fail again")
	}
	if err != nil || moved != 5 {
		t.Fatalf("Replay = %d, %v; want 5, nil (a snapshot of what was there)", moved, err)
	}
	waitLen(t, mem, "error", 5)
	if c := calls.Load(); c > 10 {
		t.Errorf("handler called %d times for 5 messages replayed once", c)
	}
}

func TestHandleRejectsValueAndPointerOfOneType(t *testing.T) {
	t.Parallel()
	b, _ := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err := bus.Handle(b, func(context.Context, PlaceOrder) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := bus.Handle(b, func(context.Context, *PlaceOrder) error { return nil })
	if !errors.Is(err, bus.ErrInvalidRegistration) {
		t.Fatalf("Handle[*PlaceOrder] after Handle[PlaceOrder] = %v, want ErrInvalidRegistration", err)
	}
	if err := bus.Handle(b, func(context.Context, PlaceOrder) error { return nil }); err != nil {
		t.Errorf("a second handler of the same type must stay allowed: %v", err)
	}
}

func TestHandleRejectsInterfaceType(t *testing.T) {
	t.Parallel()
	b, _ := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err := bus.Handle(b, func(context.Context, any) error { return nil }); !errors.Is(err, bus.ErrInvalidRegistration) {
		t.Fatalf("Handle[any] = %v, want ErrInvalidRegistration", err)
	}
	if err := bus.Handle(b, func(context.Context, error) error { return nil }); !errors.Is(err, bus.ErrInvalidRegistration) {
		t.Fatalf("Handle[error] = %v, want ErrInvalidRegistration", err)
	}
}

func TestWithHeaderRefusesReservedHeaders(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "client", Transport: mem, SendOnly: true}, nil)
	err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.WithHeader(bus.HeaderDelayedRetries, "9"))
	var oe *bus.OptionError
	if !errors.As(err, &oe) || oe.Option != "WithHeader" {
		t.Fatalf("WithHeader(%q) = %v, want *OptionError for WithHeader", bus.HeaderDelayedRetries, err)
	}
	if mem.Len("sales") != 0 {
		t.Error("a message with a reserved header was sent")
	}
}

func TestEndpointDotNamesRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{".", ".."} {
		if _, err := bus.New(bus.Config{Endpoint: name}); !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("Endpoint %q: err = %v, want ErrInvalidConfig", name, err)
		}
		b, _ := bus.New(bus.Config{Endpoint: "ok", Logger: quiet()})
		if err := bus.Route[PlaceOrder](b, name); err == nil {
			t.Errorf("Route to %q accepted", name)
		}
	}
}

func TestSendTimeoutAboveAThirdOfLeaseIsRejected(t *testing.T) {
	t.Parallel()
	_, err := bus.New(bus.Config{Endpoint: "sales", Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second, SendTimeout: 2 * time.Second}})
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Dispatcher.SendTimeout" {
		t.Fatalf("New = %v, want *ConfigError on Dispatcher.SendTimeout", err)
	}
	if _, err := bus.New(bus.Config{Endpoint: "sales", Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second, SendTimeout: time.Second}}); err != nil {
		t.Errorf("SendTimeout of exactly a third of Lease refused: %v", err)
	}
}

func TestSendConcurrentWithStartIsRaceFree(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			_ = b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(time.Hour))
		}
	})
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = b.Stop(ctxT(t))
}

func TestErrorQueueSendIsBoundedBySendTimeout(t *testing.T) {
	t.Parallel()
	tr := &hanging{Transport: bus.NewMemoryTransport(), queue: "error"} // never accepts until ctx ends
	tr.down.Store(true)
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Logger: quiet(),
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}, Dispatcher: bus.DispatcherConfig{SendTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(b, func(context.Context, PlaceOrder) error { return errors.New("fails") })
	done := make(chan error, 1)
	go func() { done <- b.Receive(context.Background(), envelopeOf(t, PlaceOrder{ID: "1"})) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Receive = nil, want an error: the error queue never accepted the message")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("moving to an error queue that hangs was not bounded by SendTimeout")
	}
}

// cancellingTransport delivers one envelope with a ctx it cancels while the
// handler runs, as a transport that lost the message would.
type cancellingTransport struct {
	*bus.MemoryTransport
	env     *bus.Envelope
	running chan struct{} // the handler signals it runs
}

func (c *cancellingTransport) Receive(ctx context.Context, queue string, _ bus.ReceiveOptions, h bus.DeliveryHandler) error {
	dctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.running:
		case <-ctx.Done():
		}
		cancel()
	}()
	_ = h(dctx, c.env)
	<-ctx.Done()
	return nil
}

func TestHandlerCtxDerivesFromDeliveryCtx(t *testing.T) {
	t.Parallel()
	tr := &cancellingTransport{MemoryTransport: bus.NewMemoryTransport(), env: envelopeOf(t, PlaceOrder{ID: "1"}), running: make(chan struct{}, 1)}
	seen := make(chan error, 1)
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, _ PlaceOrder) error {
			select {
			case tr.running <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				seen <- ctx.Err()
			case <-time.After(10 * time.Second):
				seen <- nil
			}
			return ctx.Err()
		})
	})
	if err := <-seen; err == nil {
		t.Fatal("the handler's ctx was not cancelled when the delivery's ctx was")
	}
}

// flakyDelete fails the first deletes of scheduled rows.
type flakyDelete struct {
	*bus.MemoryPersistence
	failures atomic.Int64
}

func (f *flakyDelete) DeleteOutgoing(ctx context.Context, c []bus.Claim) (int, error) {
	if f.failures.Add(-1) >= 0 {
		return 0, errors.New("database blip")
	}
	return f.MemoryPersistence.DeleteOutgoing(ctx, c)
}

// A delete that fails after the hand-over is retried within the lease, so
// the row is not sent again once the lease is over. Time is a fake clock:
// it moves in small steps while the dispatcher works, then past the lease.
func TestDeleteAfterHandOverIsRetriedWithinLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store := &flakyDelete{MemoryPersistence: bus.NewMemoryPersistence()}
	store.failures.Store(2)
	in := bustest.NewRecorder[PlaceOrder]()
	obs := &recordingObserver{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: store, Clock: clock, Observer: obs, Logger: quiet(),
		Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second}}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	drivertest.Eventually(t, 20*time.Second, func() bool {
		if in.Len() == 1 && store.Len() == 0 {
			return true
		}
		clock.Advance(5 * time.Millisecond)
		return false
	}, "the row to be handed over, then deleted after two failed deletes")
	if took := clock.Now().Sub(t0); took > 2*time.Second {
		t.Fatalf("deleted %v after the send, too close to the 3 s lease to tell", took)
	}
	pastLease := clock.Now().Add(3500 * time.Millisecond)
	clock.Advance(3500 * time.Millisecond)
	var look bus.ObserverEvent
	drivertest.Eventually(t, 20*time.Second, func() bool {
		var ok bool
		if look, ok = obs.lookSince(pastLease); ok {
			return true
		}
		clock.Advance(100 * time.Millisecond)
		return false
	}, "a claim of the dispatcher after the lease")
	if look.Kind != bus.EventClaimEmpty || in.Len() != 1 {
		t.Errorf("after the lease the dispatcher's claim was %v, and the row was delivered %d times; want an empty claim and once", look.Kind, in.Len())
	}
}

// durableFailing is a store that says it is durable and cannot store.
type durableFailing struct{ *bus.MemoryPersistence }

func (durableFailing) Durable() bool { return true }
func (durableFailing) StoreOutgoing(context.Context, []bus.OutgoingMessage) error {
	return errors.New("database down")
}

func TestMessageBacksOffWhileDelayedRetryCannotBeStored(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	var calls atomic.Int64
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: mem, Persistence: durableFailing{bus.NewMemoryPersistence()},
		Retries: bus.RetryConfig{Immediate: -1, Delayed: 3}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { calls.Add(1); return errors.New("fails") })
	})
	if err := mem.Send(ctxT(t), "sales", envelopeOf(t, PlaceOrder{ID: "1"})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if c := calls.Load(); c > 10 || c == 0 {
		t.Errorf("handler called %d times in 1.5 s while the retry could not be stored; want a few (backing off)", c)
	}
}

// named gives a memory transport another identity: another broker.
type named struct {
	*bus.MemoryTransport
	id string
}

func (n named) Identity() string { return n.id }

func TestSharedStoreSendsRowsThroughTheirOwnTransport(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	memA, memB := bus.NewMemoryTransport(), bus.NewMemoryTransport()
	a := bustest.StartBus(t, bus.Config{Endpoint: "a", Persistence: store, Transport: named{memA, "broker-a"}}, nil)
	b := bustest.StartBus(t, bus.Config{Endpoint: "b", Persistence: store, Transport: named{memB, "broker-b"}}, nil)
	for i := range 20 {
		if err := a.Send(ctxT(t), PlaceOrder{}, bus.To("target-a"), bus.DeliverAfter(time.Duration(i)*time.Millisecond+5*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("target-b"), bus.DeliverAfter(time.Duration(i)*time.Millisecond+5*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	waitLen(t, memA, "target-a", 20)
	waitLen(t, memB, "target-b", 20)
	if memA.Len("target-b") != 0 || memB.Len("target-a") != 0 {
		t.Errorf("rows crossed transports: broker a has %d of b's, broker b has %d of a's", memA.Len("target-b"), memB.Len("target-a"))
	}
}

func TestEndpointConsumingItsOwnErrorQueueIsRefused(t *testing.T) {
	t.Parallel()
	_, err := bus.New(bus.Config{Endpoint: "error"})
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "ErrorQueue" {
		t.Fatalf("New(Endpoint: error) = %v, want *ConfigError on ErrorQueue", err)
	}
	if _, err := bus.New(bus.Config{Endpoint: "error", ErrorQueue: "error.unhandled"}); err != nil {
		t.Errorf("an error-queue consumer with its own error queue refused: %v", err)
	}
}

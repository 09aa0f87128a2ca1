package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// Tests of the contracts later capabilities rest on: lease ownership,
// stable IDs, handler lifetimes, durable retries, dead letters, replay.

// blockingSend holds every send to queue until release is closed, and
// reports the first one on entered.
type blockingSend struct {
	bus.Transport
	queue   string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingSend) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if queue == b.queue {
		b.once.Do(func() { close(b.entered) })
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Transport.Send(ctx, queue, env)
}

func TestCancelScheduledWhileDispatchingReturnsFalse(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	tr := &blockingSend{Transport: mem, queue: "sales", entered: make(chan struct{}), release: make(chan struct{})}
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr,
		Dispatcher: bus.DispatcherConfig{Lease: 30 * time.Second}}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.WithMessageID("m1"), bus.DeliverAfter(10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	<-tr.entered // the dispatcher holds the row and is handing it over
	ok, err := b.CancelScheduled(ctxT(t), "m1")
	if err != nil || ok {
		t.Fatalf("CancelScheduled of a message being dispatched = %v, %v; want false, nil", ok, err)
	}
	close(tr.release)
	in.WaitFor(t, 1)
	time.Sleep(50 * time.Millisecond)
	if in.Len() != 1 {
		t.Errorf("delivered %d times, want once", in.Len())
	}
}

func TestHandlerRetryReusesOutgoingIDs(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	store := bus.NewMemoryPersistence()
	var failed atomic.Bool // the first send to shipping fails
	tr := &rejecting{Transport: mem, reject: func(q string, _ *bus.Envelope) bool {
		return q == "shipping" && failed.CompareAndSwap(false, true)
	}}
	var calls atomic.Int64
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store,
		Dispatcher: bus.DispatcherConfig{Disabled: true}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			calls.Add(1)
			// A delayed send is stored first; the immediate one then fails
			// on the first attempt, so the attempt is retried.
			if err := b.Send(ctx, OrderPlaced{ID: "later"}, bus.To("billing"), bus.DeliverAfter(time.Hour)); err != nil {
				return err
			}
			return b.Send(ctx, OrderPlaced{ID: "now"}, bus.To("shipping"))
		})
	})
	sender := bustest.StartBus(t, bus.Config{Endpoint: "client", Transport: tr, SendOnly: true}, nil)
	if err := sender.Send(ctxT(t), PlaceOrder{ID: "o1"}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, mem, "shipping", 1)
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (one failed flush, one retry)", calls.Load())
	}
	if n := store.Len(); n != 1 {
		t.Errorf("the retried handler stored %d scheduled rows, want 1: its sends must keep their IDs", n)
	}
}

// receiveEnds is an observer that signals each concluded delivery.
type receiveEnds struct {
	*recordingObserver
	ended chan struct{}
}

func (r receiveEnds) EndReceive(ctx context.Context, info bus.ReceiveEnd) {
	r.recordingObserver.EndReceive(ctx, info)
	r.ended <- struct{}{}
}

func TestSendAfterHandlerReturnedFailsWithErrHandlerDone(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	late := make(chan error, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: mem}, nil)
	_ = b // handlers are registered before Start
	obs := receiveEnds{&recordingObserver{}, make(chan struct{}, 1)}
	b2 := bustest.StartBus(t, bus.Config{Endpoint: "sales2", Transport: mem, Observer: obs}, func(b2 *bus.Bus) {
		_ = bus.Handle(b2, func(ctx context.Context, m PlaceOrder) error {
			go func() {
				select { // outlives the handler: sends once the delivery is concluded
				case <-obs.ended:
				case <-time.After(10 * time.Second):
				}
				late <- b2.Send(ctx, OrderPlaced{ID: "late"}, bus.To("billing"))
			}()
			return nil
		})
	})
	if err := b2.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales2")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-late:
		if !errors.Is(err, bus.ErrHandlerDone) {
			t.Fatalf("Send after the handler returned = %v, want ErrHandlerDone", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late send never returned")
	}
	if n := mem.Len("billing"); n != 0 {
		t.Errorf("billing got %d messages from a finished handler", n)
	}
}

func TestAbandonedHandlerSendFailsWithErrHandlerDone(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	release := make(chan struct{})
	late := make(chan error, 1)
	var once sync.Once
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: mem, HandlerTimeout: 20 * time.Millisecond,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, nil)
	b2 := bustest.StartBus(t, bus.Config{Endpoint: "slow", Transport: mem, HandlerTimeout: 20 * time.Millisecond,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b2 *bus.Bus) {
		_ = bus.Handle(b2, func(ctx context.Context, m PlaceOrder) error {
			<-release // ignores its ctx and outlives HandlerTimeout
			err := b2.Send(ctx, OrderPlaced{ID: "late"}, bus.To("billing"))
			once.Do(func() { late <- err })
			return err
		})
	})
	_ = b
	if err := b2.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("slow")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, mem, "error", 1) // the attempt timed out
	close(release)
	if err := <-late; !errors.Is(err, bus.ErrHandlerDone) {
		t.Fatalf("send from an abandoned handler = %v, want ErrHandlerDone", err)
	}
}

func TestDelayedRetriesSkippedWithBrokerAndNonDurableStore(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	store := bus.NewMemoryPersistence()
	var logs logBuffer
	var calls atomic.Int64
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: named{mem, "broker://test"}, Persistence: store, Logger: logs.logger(),
		Retries: bus.RetryConfig{Immediate: 1, Delayed: 3}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { calls.Add(1); return errors.New("fails") })
	})
	if !strings.Contains(logs.String(), "delayed retries are off") {
		t.Errorf("no warning at Start; logs: %s", logs.String())
	}
	if err := mem.Send(ctxT(t), "sales", envelopeOf(t, PlaceOrder{ID: "1"})); err != nil {
		t.Fatal(err)
	}
	waitLen(t, mem, "error", 1)
	if calls.Load() != 2 || store.Len() != 0 {
		t.Errorf("handler ran %d times and %d rows were stored; want 2 (1 + 1 immediate retry) and none", calls.Load(), store.Len())
	}
}

// envelopeOf makes a wire envelope for m, as another endpoint would send it.
func envelopeOf(t *testing.T, m PlaceOrder) *bus.Envelope {
	t.Helper()
	return &bus.Envelope{ID: "env-" + m.ID, Type: bus.MessageName(m), Kind: bus.KindCommand,
		Body: []byte(`{"ID":"` + m.ID + `"}`), ContentType: "application/json", Destination: "sales", SentAt: time.Now().UTC()}
}

func TestSecondStopReturnsNil(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctxT(t)); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
}

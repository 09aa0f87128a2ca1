package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestTimerOptionsValidate(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "shop", SendOnly: true}, nil)
	for name, opt := range map[string]bus.Option{
		"ttbr zero":      bus.TimeToBeReceived(0),
		"ttbr negative":  bus.TimeToBeReceived(-time.Second),
		"ttrq zero":      bus.TimeToReachQueue(0),
		"ack level":      bus.Acknowledge(0, "admin"),
		"ack bad level":  bus.Acknowledge(8, "admin"),
		"ack bad queue":  bus.Acknowledge(bus.AckNegative, "bad queue"),
		"ack empty name": bus.Acknowledge(bus.AckNegative, ""),
	} {
		if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), opt); !errors.Is(err, bus.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestTimersOnTheWireAreAbsoluteUTC(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr}, nil)
	local := time.FixedZone("UTC+5", 5*3600)
	due := time.Now().In(local).Add(time.Hour)
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.DeliverAt(due), bus.WithMessageID("m"),
		bus.TimeToBeReceived(time.Minute), bus.TimeToReachQueue(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.TimeToBeReceived(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The immediate one is in the queue: its clock started at the send.
	var got *bus.Envelope
	ctx, cancel := context.WithCancel(ctxT(t))
	go tr.Receive(ctx, "x", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, e *bus.Envelope) error {
		got = e
		cancel()
		return nil
	})
	<-ctx.Done()
	if got.ExpiresAt.Location() != time.UTC || got.ExpiresAt.Sub(got.SentAt) != time.Minute {
		t.Errorf("ExpiresAt %v (sent %v), want UTC, one minute after sending", got.ExpiresAt, got.SentAt)
	}
	// The delayed one: both clocks start at the due time.
	store := bus.NewMemoryPersistence()
	b2 := bustest.StartBus(t, bus.Config{Endpoint: "shop2", Transport: tr, Persistence: store, SendOnly: true}, nil)
	if err := b2.Send(ctxT(t), PlaceOrder{}, bus.To("x"), bus.DeliverAt(due), bus.TimeToBeReceived(time.Minute), bus.TimeToReachQueue(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	rows, _ := store.ClaimDueOutgoing(ctxT(t), "memory", due.Add(time.Second), 1, time.Minute)
	env, err := bus.UnmarshalEnvelope(rows[0].Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if !env.ExpiresAt.Equal(due.Add(time.Minute)) || env.ExpiresAt.Location() != time.UTC {
		t.Errorf("ExpiresAt = %v, want %v in UTC", env.ExpiresAt, due.Add(time.Minute))
	}
	by := env.Header(bus.HeaderReachQueueBy)
	if !strings.HasSuffix(by, "Z") {
		t.Errorf("reach-queue-by %q is not UTC", by)
	}
	if at, _ := time.Parse(time.RFC3339Nano, by); !at.Equal(due.Add(10 * time.Second)) {
		t.Errorf("reach-queue-by = %v, want %v", at, due.Add(10*time.Second))
	}
}

// A message waiting behind a slow handler expires: it is never handled, it
// is dead-lettered, and a negative acknowledgement reaches the admin queue.
func TestTimeToBeReceivedLapsesBehindSlowHandler(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	acks := bustest.NewRecorder[bus.Acknowledgement]()
	bustest.StartBus(t, bus.Config{Endpoint: "admin", Transport: tr}, func(b *bus.Bus) { _ = bus.Handle(b, acks.Handler) })
	var handled atomic.Int64
	slow := make(chan struct{})
	clock := bustest.NewFakeClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	b := bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Concurrency: 1, Clock: clock}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			handled.Add(1)
			if m.ID == "slow" {
				<-slow
			}
			return nil
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{ID: "slow"}, bus.To("worker")); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "urgent"}, bus.To("worker"), bus.WithMessageID("urgent"), bus.WithCorrelationID("c-1"),
		bus.TimeToBeReceived(100*time.Millisecond), bus.DeadLetterOnExpiry(), bus.Acknowledge(bus.AckNegative, "admin")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(250 * time.Millisecond) // while the slow message holds the only worker
	close(slow)
	waitLen(t, tr, "deadletter", 1)
	acks.WaitFor(t, 1)
	a := acks.Messages()[0]
	if a.MessageID != "urgent" || a.Class != bus.AckReceiveTimeout || a.CorrelationID != "c-1" || a.Endpoint != "worker" {
		t.Errorf("acknowledgement = %+v", a)
	}
	if handled.Load() != 1 {
		t.Errorf("handler called %d times, want 1 (the expired message costs none)", handled.Load())
	}
	if m := b.Metrics(); m.Expired != 1 {
		t.Errorf("expired counter = %d", m.Expired)
	}
	if tr.Len("worker") != 0 {
		t.Error("expired message still in the queue: it must be acknowledged, not redelivered")
	}
}

// workerBehindOutage starts an "admin" bus recording acknowledgements and a
// "worker" bus handling PlaceOrder with handle, whose dispatcher retries
// every 20 ms and cannot send to the worker queue while down is true (it
// starts true). Both share mem.
func workerBehindOutage(t *testing.T, handle func(context.Context, PlaceOrder) error) (b *bus.Bus, mem *bus.MemoryTransport, down *atomic.Bool, acks *bustest.Recorder[bus.Acknowledgement]) {
	t.Helper()
	mem = bus.NewMemoryTransport()
	down = new(atomic.Bool)
	down.Store(true)
	tr := &rejecting{Transport: mem, reject: func(q string, _ *bus.Envelope) bool { return down.Load() && q == "worker" }}
	acks = bustest.NewRecorder[bus.Acknowledgement]()
	bustest.StartBus(t, bus.Config{Endpoint: "admin", Transport: mem}, func(b *bus.Bus) { _ = bus.Handle(b, acks.Handler) })
	b = bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr,
		Dispatcher: bus.DispatcherConfig{RetryBackoff: 20 * time.Millisecond, MaximumRecoveryFailuresPerSecond: 1000}},
		func(b *bus.Bus) { _ = bus.Handle(b, handle) })
	return b, mem, down, acks
}

// A delayed message whose time to reach queue lapses while the transport is
// down is discarded by the dispatcher, with the ReachQueueTimeout class.
func TestTimeToReachQueueLapsesDuringOutage(t *testing.T) {
	t.Parallel()
	in := bustest.NewRecorder[PlaceOrder]()
	b, mem, down, acks := workerBehindOutage(t, in.Handler)
	opts := []bus.Option{bus.To("worker"), bus.DeliverAfter(50 * time.Millisecond), bus.DeadLetterOnExpiry(), bus.Acknowledge(bus.AckFull, "admin")}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "short"}, append(opts, bus.TimeToReachQueue(200*time.Millisecond), bus.WithMessageID("short"))...); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), PlaceOrder{ID: "long"}, append(opts, bus.TimeToReachQueue(time.Hour), bus.WithMessageID("long"))...); err != nil {
		t.Fatal(err)
	}
	waitLen(t, mem, "deadletter", 1)
	down.Store(false)
	in.WaitFor(t, 1)
	acks.WaitFor(t, 3) // short: ReachQueueTimeout; long: ReachedQueue and Received
	if in.Messages()[0].ID != "long" {
		t.Errorf("delivered %q, want only long", in.Messages()[0].ID)
	}
	classes := map[string]bus.AckClass{}
	for _, a := range acks.Messages() {
		classes[a.MessageID+"/"+string(a.Class)] = a.Class
	}
	for _, want := range []string{"short/ReachQueueTimeout", "long/ReachedQueue", "long/Received"} {
		if _, ok := classes[want]; !ok {
			t.Errorf("missing acknowledgement %s; got %v", want, classes)
		}
	}
}

// The smaller timer wins: a time to be received shorter than the time to
// reach queue discards the message at the dispatcher too.
func TestSmallerTimerWins(t *testing.T) {
	t.Parallel()
	b, _, _, acks := workerBehindOutage(t, func(context.Context, PlaceOrder) error { return nil })
	start := time.Now()
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("worker"), bus.DeliverAfter(20*time.Millisecond),
		bus.TimeToReachQueue(time.Hour), bus.TimeToBeReceived(150*time.Millisecond), bus.Acknowledge(bus.AckNegative, "admin")); err != nil {
		t.Fatal(err)
	}
	acks.WaitFor(t, 1)
	if c := acks.Messages()[0].Class; c != bus.AckReceiveTimeout {
		t.Errorf("class %s, want ReceiveTimeout (the smaller timer)", c)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("discarded after %v: the hour-long time to reach queue governed", el)
	}
}

func TestMessageWithoutTimersUnaffected(t *testing.T) {
	t.Parallel()
	clockStart := time.Now()
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "worker"}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("worker"), bus.DeliverAfter(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	in.WaitFor(t, 1)
	e := in.Envelopes()[0]
	if !e.ExpiresAt.IsZero() || e.Header(bus.HeaderReachQueueBy) != "" || b.Metrics().Expired != 0 || in.Times()[0].Before(clockStart) {
		t.Errorf("untimed message got timers: %+v", e)
	}
}

package bustest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// adminBus starts an endpoint that records acknowledgements.
func adminBus(t *testing.T, tr bus.Transport, ns string) (*Recorder[bus.Acknowledgement], string) {
	acks := NewRecorder[bus.Acknowledgement]()
	c := cfg(tr, ns, "admin")
	StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, acks.Handler) })
	return acks, c.Endpoint
}

func testTimeToBeReceived(t *testing.T, tr bus.Transport, ns string) {
	acks, admin := adminBus(t, tr, ns)
	var handled atomic.Int64
	release := make(chan struct{})
	c := cfg(tr, ns, "worker")
	c.Concurrency = 1
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(_ context.Context, m Ping) error {
			handled.Add(1)
			if m.N == 0 {
				<-release
			}
			return nil
		})
	})
	dlq := drainQueue(t, tr, c.DeadLetterQueue)
	if err := b.Send(ctxFor(t), Ping{N: 0}, bus.To(c.Endpoint)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxFor(t), Ping{N: 1}, bus.To(c.Endpoint), bus.WithMessageID("ttbr-"+ns),
		bus.TimeToBeReceived(200*time.Millisecond), bus.DeadLetterOnExpiry(), bus.Acknowledge(bus.AckNegative, admin)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // the second message waits behind the slow first
	close(release)
	dlq.expectExactly(t, 1, 0)
	acks.expectExactly(t, 1, 300*time.Millisecond)
	_, envs, _ := dlq.snapshot()
	if e := envs[0]; e.ID != "ttbr-"+ns || e.Headers[bus.HeaderDeadLetterTimer] != "time-to-be-received" || e.Headers[bus.HeaderDeadLetterEndpoint] != c.Endpoint {
		t.Errorf("dead-lettered %s with headers %v", e.ID, e.Headers)
	}
	got, _, _ := acks.snapshot()
	if got[0].MessageID != "ttbr-"+ns || got[0].Class != bus.AckReceiveTimeout {
		t.Errorf("acknowledgement %+v", got[0])
	}
	if handled.Load() != 1 {
		t.Errorf("handler called %d times, want 1: an expired message costs no handler call", handled.Load())
	}
}

// outage wraps a transport and refuses sends to one queue while down.
type outage struct {
	bus.Transport
	queue string
	down  atomic.Bool
}

func testTimeToReachQueue(t *testing.T, tr bus.Transport, ns string) {
	acks, admin := adminBus(t, tr, ns)
	c := cfg(tr, ns, "worker")
	out := &outage{Transport: tr, queue: c.Endpoint}
	out.down.Store(true)
	c.Transport = out
	c.Dispatcher = bus.DispatcherConfig{RetryBackoff: 20 * time.Millisecond, MaximumRecoveryFailuresPerSecond: 1000}
	handled := NewRecorder[Ping]()
	b := StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, handled.Handler) })
	dlq := drainQueue(t, tr, c.DeadLetterQueue)
	if err := b.Send(ctxFor(t), Ping{N: 1}, bus.To(c.Endpoint), bus.WithMessageID("ttrq-"+ns), bus.DeliverAfter(50*time.Millisecond),
		bus.TimeToReachQueue(300*time.Millisecond), bus.DeadLetterOnExpiry(), bus.Acknowledge(bus.AckNegative, admin)); err != nil {
		t.Fatal(err)
	}
	dlq.expectExactly(t, 1, 0)
	out.down.Store(false)
	acks.expectExactly(t, 1, 500*time.Millisecond)
	got, _, _ := acks.snapshot()
	if got[0].MessageID != "ttrq-"+ns || got[0].Class != bus.AckReachQueueTimeout {
		t.Errorf("acknowledgement %+v", got[0])
	}
	if handled.Len() != 0 {
		t.Error("a message past its time to reach queue was delivered")
	}
}

func testPositiveAcks(t *testing.T, tr bus.Transport, ns string) {
	acks, admin := adminBus(t, tr, ns)
	handled := NewRecorder[Ping]()
	c := cfg(tr, ns, "worker")
	b := StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, handled.Handler) })
	if err := b.Send(ctxFor(t), Ping{N: 1}, bus.To(c.Endpoint), bus.WithMessageID("pos-"+ns),
		bus.TimeToBeReceived(time.Minute), bus.Acknowledge(bus.AckFull, admin)); err != nil {
		t.Fatal(err)
	}
	handled.expectExactly(t, 1, 0)
	acks.expectExactly(t, 2, 300*time.Millisecond)
	got, _, _ := acks.snapshot()
	classes := map[bus.AckClass]bool{}
	for _, a := range got {
		classes[a.Class] = a.MessageID == "pos-"+ns
	}
	if !classes[bus.AckReachedQueue] || !classes[bus.AckReceived] {
		t.Errorf("acknowledgements %+v, want ReachedQueue and Received", got)
	}
}

// A message in the dead-letter queue is final: an endpoint consuming that
// queue handles it once, never expires it, dead-letters it or acknowledges
// it again, though its timer lapsed long ago.
func testDeadLetterFinal(t *testing.T, tr bus.Transport, ns string) {
	acks, admin := adminBus(t, tr, ns)
	release := make(chan struct{})
	c := cfg(tr, ns, "worker")
	c.Concurrency = 1
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(_ context.Context, m Ping) error {
			if m.N == 0 {
				<-release
			}
			return nil
		})
	})
	if err := b.Send(ctxFor(t), Ping{N: 0}, bus.To(c.Endpoint)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxFor(t), Ping{N: 1}, bus.To(c.Endpoint), bus.WithMessageID("final-"+ns),
		bus.TimeToBeReceived(100*time.Millisecond), bus.DeadLetterOnExpiry(), bus.Acknowledge(bus.AckNegative, admin)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the second message expires behind the first
	close(release)
	acks.expectExactly(t, 1, 0)
	// An endpoint named after the dead-letter queue, whose own dead-letter
	// queue is itself.
	dead := NewRecorder[Ping]()
	dc := cfg(tr, ns, "deadletter")
	StartBus(t, dc, func(b *bus.Bus) { _ = bus.Handle(b, dead.Handler) })
	dead.expectExactly(t, 1, 500*time.Millisecond)
	_, envs, _ := dead.snapshot()
	e := envs[0]
	if e.ID != "final-"+ns || !e.ExpiresAt.IsZero() || e.Headers[bus.HeaderOriginalExpiresAt] == "" {
		t.Errorf("dead-letter copy %s: ExpiresAt %v, original expiry header %q; want no expiry and the original in a header",
			e.ID, e.ExpiresAt, e.Headers[bus.HeaderOriginalExpiresAt])
	}
	if got, _, _ := acks.snapshot(); len(got) != 1 || got[0].Class != bus.AckReceiveTimeout {
		t.Errorf("acknowledgements %+v, want only the original receive timeout", got)
	}
}

package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// heldCounting is a memory store that counts the rows claimed and not yet
// settled (deleted, released or recorded as failed), the most of them at
// once, the most claims running at once, and the delete calls.
type heldCounting struct {
	*bus.MemoryPersistence
	held, maxHeld        atomic.Int64
	claiming, maxClaims  atomic.Int64
	claims, claimedTotal atomic.Int64
	deletes              atomic.Int64
}

func raise(m *atomic.Int64, v int64) {
	for old := m.Load(); v > old && !m.CompareAndSwap(old, v); old = m.Load() {
	}
}

func (h *heldCounting) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	raise(&h.maxClaims, h.claiming.Add(1))
	defer h.claiming.Add(-1)
	c, err := h.MemoryPersistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
	if len(c.Rows) > 0 {
		h.claims.Add(1)
		h.claimedTotal.Add(int64(len(c.Rows)))
		raise(&h.maxHeld, h.held.Add(int64(len(c.Rows))))
	}
	return c, err
}

func (h *heldCounting) settled(n int, err error) (int, error) {
	h.held.Add(-int64(n))
	return n, err
}

func (h *heldCounting) DeleteOutgoing(ctx context.Context, c []bus.Claim) (int, error) {
	h.deletes.Add(1)
	return h.settled(h.MemoryPersistence.DeleteOutgoing(ctx, c))
}

func (h *heldCounting) ReleaseOutgoing(ctx context.Context, c []bus.Claim) (int, error) {
	return h.settled(h.MemoryPersistence.ReleaseOutgoing(ctx, c))
}

func (h *heldCounting) RecordOutgoingFailures(ctx context.Context, f []bus.OutgoingFailure) (int, error) {
	return h.settled(h.MemoryPersistence.RecordOutgoingFailures(ctx, f))
}

// slowBatchTransport is a BatchTransport whose SendBatch takes perRow of
// the fake clock's time for each message, like a broker that confirms at
// a fixed rate.
type slowBatchTransport struct {
	*bus.MemoryTransport
	clock  *bustest.FakeClock
	perRow time.Duration
}

func (s *slowBatchTransport) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	t := s.clock.NewTimer(time.Duration(len(batch)) * s.perRow)
	defer t.Stop()
	errs := make([]error, len(batch))
	select {
	case <-t.C():
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	for i, m := range batch {
		errs[i] = s.Send(ctx, m.Queue, m.Envelope)
	}
	return errs
}

// The claimed rows a dispatcher holds never exceed what its measured
// hand-over rate settles within half the lease: with a transport that
// confirms a row in 30 ms (33 rows/s) and a 6 s lease, 100 rows, though the
// window (6 s of rows due every 30 ms: 200) and the cap (8 batches of 20:
// 160) would allow more. The bound starts at two batches and rises to it,
// one claim at a time. Every row arrives once.
func TestLookAheadHoldsWhatItsHandOverRateSettlesWithinHalfTheLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store := &heldCounting{MemoryPersistence: bus.NewMemoryPersistence()}
	const batch, perRow, lease, n = 20, 30 * time.Millisecond, 6 * time.Second, 400
	tr := &slowBatchTransport{MemoryTransport: bus.NewMemoryTransport(), clock: clock, perRow: perRow}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock,
		Dispatcher: bus.DispatcherConfig{BatchSize: batch, Lease: lease, LookAhead: lease}}, nil)
	for i := range n {
		must(t, b.Send(ctxT(t), PlaceOrder{ID: "x"}, bus.To("billing"), bus.DeliverAt(t0.Add(time.Second+time.Duration(i)*perRow)),
			bus.WithMessageID(fmt.Sprintf("m-%03d", i))))
	}
	deadline := time.Now().Add(time.Minute)
	for tr.Len("billing") < n || store.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %d of %d messages sent, %d rows left", tr.Len("billing"), n, store.Len())
		}
		if clock.WaitForTimers(ctxT(t), 1) {
			clock.Advance(10 * time.Millisecond)
		}
	}
	t.Logf("at most %d rows held at once, in %d claims", store.maxHeld.Load(), store.claims.Load())
	rate := float64(batch) / (batch * perRow).Seconds()
	bound := int64(rate * (lease / 2).Seconds())
	if got := store.maxHeld.Load(); got > bound || got <= 2*batch {
		t.Errorf("at most %d rows claimed and unsettled at once, want more than the starting %d and at most %d (%.0f rows/s for half the %v lease)",
			got, 2*batch, bound, rate, lease)
	}
	if got := store.maxClaims.Load(); got != 1 {
		t.Errorf("%d claims ran at once, want one at a time", got)
	}
	if got := tr.Len("billing"); got != n || store.claimedTotal.Load() != n {
		t.Errorf("%d messages sent from %d rows claimed, want each of the %d once", got, store.claimedTotal.Load(), n)
	}
}

// gatedBatchTransport holds every SendBatch call until the gate opens.
type gatedBatchTransport struct {
	*bus.MemoryTransport
	calls     atomic.Int64
	gate      chan struct{}
	closeGate sync.Once
}

func (g *gatedBatchTransport) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	g.calls.Add(1)
	<-g.gate
	errs := make([]error, len(batch))
	for i, m := range batch {
		errs[i] = g.Send(ctx, m.Queue, m.Envelope)
	}
	return errs
}

func (g *gatedBatchTransport) open() { g.closeGate.Do(func() { close(g.gate) }) }

// While the transport holds the first batch's confirms, the next claim
// runs: a burst drains at the pace of the slower of claim and hand-over,
// not of their sum. No row is deleted before its confirm, and each
// arrives once.
func TestLookAheadClaimsWhileTheHandOverIsUnderWay(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store := &heldCounting{MemoryPersistence: bus.NewMemoryPersistence()}
	tr := &gatedBatchTransport{MemoryTransport: bus.NewMemoryTransport(), gate: make(chan struct{})}
	t.Cleanup(tr.open)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock,
		Dispatcher: bus.DispatcherConfig{BatchSize: 10}}, nil)
	const n = 30
	for i := range n {
		must(t, b.Send(ctxT(t), PlaceOrder{ID: "x"}, bus.To("billing"), bus.DeliverAfter(time.Second), bus.WithMessageID(fmt.Sprintf("m-%02d", i))))
	}
	// The rows fall due together; the first batch goes to the transport.
	advanceUntil(t, clock, "the first hand-over", func() bool { return tr.calls.Load() > 0 })
	drivertest.Eventually(t, 15*time.Second, func() bool { return store.claims.Load() >= 2 }, "a second claim while the first batch waits for its confirms")
	if got, calls := store.held.Load(), tr.calls.Load(); got != 20 || calls != 1 {
		t.Fatalf("%d rows held in %d hand-overs while the first waits, want 20 (two claims of 10) in one", got, calls)
	}
	if got := store.Len(); got != n {
		t.Fatalf("%d rows left while the first batch is unconfirmed, want %d", got, n)
	}
	tr.open()
	advanceUntil(t, clock, "every message", func() bool { return tr.Len("billing") >= n && store.Len() == 0 })
	if got := tr.Len("billing"); got != n {
		t.Errorf("%d messages in billing, want %d: each row once", got, n)
	}
}

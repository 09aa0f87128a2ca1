package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// timedSends records the fake clock's time at each hand-over to the
// transport: the dispatcher hands over while the test holds the clock.
type timedSends struct {
	bus.Transport
	clock *bustest.FakeClock
	mu    sync.Mutex
	at    map[string]time.Time
}

func (s *timedSends) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	s.mu.Lock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[env.ID] = s.clock.Now()
	s.mu.Unlock()
	return s.Transport.Send(ctx, queue, env)
}

// Identity keeps the wrapped transport's: the rows were stored under it.
func (s *timedSends) Identity() string { return s.Transport.(bus.TransportIdentity).Identity() }

func (s *timedSends) handedAt(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[id]
	return at, ok
}

// claimEvents returns the row counts of the claims obs saw.
func claimEvents(obs *recordingObserver) []int {
	_, events, _ := obs.snapshot()
	var n []int
	for _, ev := range events {
		if ev.Kind == bus.EventClaim {
			n = append(n, ev.Count)
		}
	}
	return n
}

func waitForClaims(t *testing.T, obs *recordingObserver, n int) {
	t.Helper()
	drivertest.Eventually(t, 15*time.Second, func() bool { return len(claimEvents(obs)) >= n }, "%d claims", n)
}

func TestLookAheadHandsEachRowOverAtItsDueTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store, mem := bus.NewMemoryPersistence(), bus.NewMemoryTransport()
	sender := bustest.StartBus(t, bus.Config{Endpoint: "sender", SendOnly: true, Transport: mem, Persistence: store, Clock: clock}, nil)
	due := map[string]time.Time{}
	for i, ms := range []int{10, 60, 110, 160, 210} {
		id := fmt.Sprint("row-", i)
		due[id] = t0.Add(time.Duration(ms) * time.Millisecond)
		must(t, sender.Send(ctxT(t), PlaceOrder{ID: id}, bus.To("sales"), bus.WithMessageID(id), bus.DeliverAt(due[id])))
	}
	tr := &timedSends{Transport: mem, clock: clock}
	obs := &recordingObserver{}
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock, Observer: obs},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	// One claim takes every row due within the window.
	waitForClaims(t, obs, 1)
	if got := claimEvents(obs); !slices.Equal(got, []int{5}) {
		t.Fatalf("claims took %v rows, want one claim of all 5", got)
	}
	// A row stored due before the rows held is claimed at once, not at
	// the next planned claim.
	due["soon"] = t0.Add(5 * time.Millisecond)
	must(t, b.Send(ctxT(t), PlaceOrder{ID: "soon"}, bus.To("sales"), bus.WithMessageID("soon"), bus.DeliverAt(due["soon"])))
	waitForClaims(t, obs, 2)
	for range 220 {
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(time.Millisecond)
	}
	in.WaitFor(t, len(due))
	for id, d := range due {
		at, ok := tr.handedAt(id)
		if !ok || !at.Equal(d) {
			t.Errorf("%s handed over at %v (%v), want at its due time %v", id, at.Sub(t0), ok, d.Sub(t0))
		}
	}
}

// dyingStore is a process's view of a shared store: once its process is
// dead, nothing it does reaches the store any more.
type dyingStore struct {
	*bus.MemoryPersistence
	dead    atomic.Bool
	claimed chan int
}

func (d *dyingStore) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := d.ClaimOutgoingAhead(ctx, transport, now, 0, limit, lease)
	return c.Rows, err
}

func (d *dyingStore) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	if d.dead.Load() {
		return bus.AheadClaim{}, nil
	}
	c, err := d.MemoryPersistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
	if len(c.Rows) > 0 {
		d.claimed <- len(c.Rows)
	}
	return c, err
}

func (d *dyingStore) DeleteOutgoing(ctx context.Context, c []bus.Claim) (int, error) {
	if d.dead.Load() {
		return 0, nil
	}
	return d.MemoryPersistence.DeleteOutgoing(ctx, c)
}

func (d *dyingStore) ReleaseOutgoing(ctx context.Context, c []bus.Claim) (int, error) {
	if d.dead.Load() {
		return 0, nil
	}
	return d.MemoryPersistence.ReleaseOutgoing(ctx, c)
}

func (d *dyingStore) RecordOutgoingFailures(ctx context.Context, f []bus.OutgoingFailure) (int, error) {
	if d.dead.Load() {
		return 0, nil
	}
	return d.MemoryPersistence.RecordOutgoingFailures(ctx, f)
}

func TestLookAheadRowsOfAKilledProcessAreDeliveredByAnotherAfterTheLease(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	shared, mem := bus.NewMemoryPersistence(), bus.NewMemoryTransport()
	const lease, window = 10 * time.Second, 250 * time.Millisecond
	cfg := bus.DispatcherConfig{Lease: lease, LookAhead: window}
	// Process A claims three rows ahead, then dies before they fall due:
	// it neither hands them over nor releases them.
	view := &dyingStore{MemoryPersistence: shared, claimed: make(chan int, 10)}
	a, err := bus.New(bus.Config{Endpoint: "a", Transport: mem, Persistence: view, Clock: clock, Dispatcher: cfg, Logger: quiet()})
	must(t, err)
	must(t, a.Start(ctxT(t)))
	for i := range 3 {
		must(t, a.Send(ctxT(t), PlaceOrder{ID: fmt.Sprint(i)}, bus.To("sales"), bus.DeliverAt(t0.Add(100*time.Millisecond))))
	}
	held := 0
	for held < 3 {
		select {
		case n := <-view.claimed:
			held += n
		case <-ctxT(t).Done():
			t.Fatal("process A never claimed the rows")
		}
	}
	view.dead.Store(true)
	must(t, a.Stop(ctxT(t)))
	// Process B delivers them once the lease of A's claim lapsed.
	tr := &timedSends{Transport: mem, clock: clock}
	in := bustest.NewRecorder[PlaceOrder]()
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: shared, Clock: clock, Dispatcher: cfg},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	leaseEnd := t0.Add(window + lease)
	for clock.Now().Before(leaseEnd.Add(-250 * time.Millisecond)) {
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(250 * time.Millisecond)
	}
	clock.WaitForTimers(ctxT(t), 1)
	if n := in.Len(); n != 0 {
		t.Fatalf("%d rows delivered before the dead process's lease lapsed", n)
	}
	for in.Len() < 3 && clock.Now().Before(leaseEnd.Add(time.Minute)) {
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(250 * time.Millisecond)
	}
	in.WaitFor(t, 3)
	for _, env := range in.Envelopes() {
		if at, _ := tr.handedAt(env.ID); at.Before(leaseEnd) {
			t.Errorf("%s handed over at %v, before the lease ended at %v", env.ID, at.Sub(t0), leaseEnd.Sub(t0))
		}
	}
	if n := shared.Len(); n != 0 {
		drivertest.Eventually(t, 15*time.Second, func() bool { return shared.Len() == 0 }, "the delivered rows to be deleted")
	}
}

func TestLookAheadReleasesHeldRowsOnStop(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(t0)
	store, mem := bus.NewMemoryPersistence(), bus.NewMemoryTransport()
	obs := &recordingObserver{}
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: mem, Persistence: store, Clock: clock, Observer: obs, Logger: quiet()})
	must(t, err)
	must(t, b.Start(ctxT(t)))
	must(t, b.Send(ctxT(t), PlaceOrder{ID: "held"}, bus.To("sales"), bus.DeliverAt(t0.Add(100*time.Millisecond))))
	waitForClaims(t, obs, 1)
	must(t, b.Stop(ctxT(t)))
	// Released: claimable at its due time by anyone, with no failure counted.
	got, err := store.ClaimDueOutgoing(ctxT(t), mem.Identity(), t0.Add(100*time.Millisecond), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].Failures != 0 {
		t.Fatalf("claim after Stop = %+v, %v; want the released row", got, err)
	}
}

// claimCounting counts the two kinds of claim on a memory store.
type claimCounting struct {
	*bus.MemoryPersistence
	due, ahead atomic.Int64
}

func (c *claimCounting) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c.due.Add(1)
	return c.MemoryPersistence.ClaimDueOutgoing(ctx, transport, now, limit, lease)
}

func (c *claimCounting) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	c.ahead.Add(1)
	return c.MemoryPersistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
}

func TestLookAheadConfig(t *testing.T) {
	t.Parallel()
	for name, d := range map[string]bus.DispatcherConfig{
		"shorter than 10ms":   {LookAhead: 5 * time.Millisecond},
		"longer than a lease": {LookAhead: 2 * time.Second, Lease: time.Second},
	} {
		_, err := bus.New(bus.Config{Endpoint: "sales", Dispatcher: d})
		var ce *bus.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Dispatcher.LookAhead" {
			t.Errorf("%s: New = %v, want a *ConfigError on Dispatcher.LookAhead", name, err)
		}
	}
	// A negative window turns look-ahead off: rows are claimed when due.
	for _, tc := range []struct {
		window    time.Duration
		wantAhead bool
	}{{-1, false}, {0, true}} {
		store := &claimCounting{MemoryPersistence: bus.NewMemoryPersistence()}
		in := bustest.NewRecorder[PlaceOrder]()
		b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: store, Dispatcher: bus.DispatcherConfig{LookAhead: tc.window}},
			func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
		must(t, b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("sales"), bus.DeliverAfter(20*time.Millisecond)))
		in.WaitFor(t, 1)
		if ahead, due := store.ahead.Load() > 0, store.due.Load() > 0; ahead != tc.wantAhead || due == tc.wantAhead {
			t.Errorf("LookAhead %v: look-ahead claims %d, plain claims %d", tc.window, store.ahead.Load(), store.due.Load())
		}
	}
}

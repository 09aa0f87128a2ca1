package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// healthT0 is where the health tests' fake clocks start: 30 s past a
// minute.
var healthT0 = time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)

// healthPing is a reminder the health tests schedule.
type healthPing struct{ N int }

// stuckClaims is a memory store whose claims find nothing: the dispatcher
// runs and claims successfully, yet no row is ever handed over.
type stuckClaims struct{ *bus.MemoryPersistence }

func (stuckClaims) ClaimDueOutgoing(ctx context.Context, _ string, _ time.Time, _ int, _ time.Duration) ([]bus.OutgoingMessage, error) {
	return nil, ctx.Err()
}

func (stuckClaims) ClaimOutgoingAhead(ctx context.Context, _ string, now time.Time, _ time.Duration, _ int, _ time.Duration) (bus.AheadClaim, error) {
	return bus.AheadClaim{Now: now}, ctx.Err()
}

// refusingSteps is a memory store that refuses every recurring step while
// refuse is set: the schedules fall behind.
type refusingSteps struct {
	*bus.MemoryPersistence
	refuse atomic.Bool
}

func (r *refusingSteps) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if r.refuse.Load() {
		return false, errors.New("refused")
	}
	return r.MemoryPersistence.AdvanceRecurring(ctx, adv)
}

// failingPing is a memory transport whose Ping fails with an error that
// carries a password, as a driver's connection error might.
type failingPing struct{ *bus.MemoryTransport }

func (failingPing) Ping(context.Context) error {
	return errors.New("dial postgres://admin:s3cret@db.internal:5432/app: connection refused")
}

func newHealthBus(t *testing.T, cfg bus.Config) *bus.Bus {
	t.Helper()
	cfg.Logger = quiet()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "health"
	}
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// Health follows the bus's life: not started, started and dispatching
// (with a claim made), stopped; the in-memory backends answer their pings.
func TestHealthFollowsTheBusState(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(healthT0)
	b := newHealthBus(t, bus.Config{Clock: clock})
	r := b.Health(ctxT(t))
	if r.Started || r.Stopped || r.Dispatching || !r.LastClaim.IsZero() {
		t.Fatalf("before Start: %+v", r)
	}
	if r.Transport.Status != bus.Reachable || r.Store.Status != bus.Reachable {
		t.Fatalf("in-memory backends: transport %v, store %v; want both reachable", r.Transport.Status, r.Store.Status)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	drivertest.Eventually(t, 20*time.Second, func() bool { r = b.Health(ctxT(t)); return !r.LastClaim.IsZero() }, "the first claim")
	if !r.Started || r.Stopped || !r.Dispatching || !r.LastClaim.Equal(healthT0) {
		t.Fatalf("started: %+v; want started, dispatching, last claim at %v", r, healthT0)
	}
	if r.DispatchLag != 0 || r.RecurringLag != 0 || r.DispatchLagErr != nil || r.RecurringLagErr != nil {
		t.Fatalf("an idle bus: %+v; want no lag", r)
	}
	if err := b.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if r = b.Health(ctxT(t)); r.Started || !r.Stopped || r.Dispatching {
		t.Fatalf("after Stop: %+v", r)
	}
}

// The dispatch lag is the age of the oldest due row not handed over, on
// the bus's clock for the in-memory store; rows not yet due add nothing.
func TestHealthDispatchLagIsTheAgeOfTheOldestDueRow(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(healthT0)
	b := newHealthBus(t, bus.Config{Clock: clock, Persistence: stuckClaims{bus.NewMemoryPersistence()}})
	if err := bus.Route[healthPing](b, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i, due := range []time.Duration{10 * time.Second, 20 * time.Second, time.Hour} {
		if err := b.Send(ctxT(t), healthPing{N: i}, bus.DeliverAt(healthT0.Add(due))); err != nil {
			t.Fatal(err)
		}
	}
	if r := b.Health(ctxT(t)); r.DispatchLag != 0 || r.DispatchLagErr != nil {
		t.Fatalf("nothing due yet: lag %v, %v", r.DispatchLag, r.DispatchLagErr)
	}
	clock.Advance(40 * time.Second)
	r := b.Health(ctxT(t))
	if r.DispatchLag != 30*time.Second || r.DispatchLagErr != nil {
		t.Fatalf("40 s in, a row due at 10 s not handed over: lag %v (%v), want 30s", r.DispatchLag, r.DispatchLagErr)
	}
	if !r.Dispatching {
		t.Fatal("the bus runs a dispatcher; Dispatching is false")
	}
}

// The recurring lag is the time since the oldest tick that passed with no
// occurrence stored: 0 while the schedule's steps succeed, growing from the
// first unstored tick once the store refuses them.
func TestHealthRecurringLagCountsFromTheFirstUnstoredTick(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(healthT0)
	store := &refusingSteps{MemoryPersistence: bus.NewMemoryPersistence()}
	b := newHealthBus(t, bus.Config{Clock: clock, Persistence: store,
		Dispatcher: bus.DispatcherConfig{PollInterval: time.Second}})
	if err := bus.Handle(b, func(context.Context, healthPing) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := b.AddRecurring(bus.Recurring{Name: "minutely", Schedule: bus.Every(time.Minute),
		Message: func(time.Time) any { return healthPing{} }, Options: []bus.Option{bus.To("health")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if r := b.Health(ctxT(t)); r.RecurringLag != 0 || r.RecurringLagErr != nil {
		t.Fatalf("a schedule just started: lag %v, %v", r.RecurringLag, r.RecurringLagErr)
	}
	rec, ok, err := store.LoadRecurring(ctxT(t), "minutely")
	if err != nil || !ok {
		t.Fatalf("record: %v, %v", ok, err)
	}
	// Start stored the ticks ahead: 12:01 and 12:02. From now on no step
	// stores any; the first tick without an occurrence is 12:03.
	if want := healthT0.Add(90 * time.Second); !rec.Last.Equal(want) {
		t.Fatalf("the record's Last is %v; the test expects %v", rec.Last, want)
	}
	store.refuse.Store(true)
	clock.Advance(2 * time.Minute) // 12:02:30
	if r := b.Health(ctxT(t)); r.RecurringLag != 0 || r.RecurringLagErr != nil {
		t.Fatalf("12:02:30, every tick so far stored: lag %v, %v", r.RecurringLag, r.RecurringLagErr)
	}
	clock.Advance(3 * time.Minute) // 12:05:30
	if r := b.Health(ctxT(t)); r.RecurringLag != 150*time.Second || r.RecurringLagErr != nil {
		t.Fatalf("12:05:30, nothing stored after 12:02: lag %v (%v), want 2m30s since the 12:03 tick", r.RecurringLag, r.RecurringLagErr)
	}
	store.refuse.Store(false)
	drivertest.Eventually(t, 20*time.Second, func() bool {
		if b.Health(ctxT(t)).RecurringLag == 0 {
			return true
		}
		clock.Advance(time.Second) // the loop retries a failed step after a poll interval
		return false
	}, "the recurring lag to end once the store accepts steps again")
}

// A ping that fails makes the backend unreachable, with the error kept in
// the report (and never shown by the probes: see the handler's tests).
func TestHealthReportsAFailedPing(t *testing.T) {
	t.Parallel()
	b := newHealthBus(t, bus.Config{Transport: failingPing{bus.NewMemoryTransport()}})
	r := b.Health(ctxT(t))
	if r.Transport.Status != bus.Unreachable || r.Transport.Err == nil || r.Store.Status != bus.Reachable {
		t.Fatalf("transport %+v, store %+v; want the transport unreachable with its error", r.Transport, r.Store)
	}
}

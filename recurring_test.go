package bus_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Tick is the message of the recurring tests.
type Tick struct{ At time.Time }

// recT0 is where the recurring tests' fake clocks start: 50 ms past a
// multiple of 200 ms.
var recT0 = time.Date(2030, 1, 1, 12, 0, 0, 50_000_000, time.UTC)

// tickLog records each occurrence handled and the fake-clock time it was
// handled at.
type tickLog struct {
	clock *bustest.FakeClock
	mu    sync.Mutex
	ticks []time.Time // HeaderRecurringTick of each delivery
	at    []time.Time
}

func (l *tickLog) handle(ctx context.Context, m Tick) error {
	env := bus.IncomingMessage(ctx)
	tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
	if err != nil || env.Header(bus.HeaderRecurringName) == "" {
		panic("occurrence without recurring headers: " + env.Header(bus.HeaderRecurringTick))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticks = append(l.ticks, tick)
	l.at = append(l.at, l.clock.Now())
	return nil
}

func (l *tickLog) snapshot() ([]time.Time, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ticks), slices.Clone(l.at)
}

func (l *tickLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ticks)
}

// waitLen waits (in real time, generously) until n occurrences arrived.
func (l *tickLog) waitLen(t *testing.T, n int) {
	t.Helper()
	drivertest.Eventually(t, 20*time.Second, func() bool { return l.len() >= n }, "%d occurrences", n)
}

// recBus builds and starts a bus on tr and store that declares r (when
// r.Name is set) and handles Tick into log.
func recBus(t *testing.T, clock *bustest.FakeClock, tr *bus.MemoryTransport, store *bus.MemoryPersistence, log *tickLog, rs ...bus.Recurring) *bus.Bus {
	t.Helper()
	return recBusLease(t, clock, tr, store, log, 0, rs...)
}

// recBusLease is recBus with Dispatcher.Lease set (0: the default).
func recBusLease(t *testing.T, clock *bustest.FakeClock, tr *bus.MemoryTransport, store *bus.MemoryPersistence, log *tickLog, lease time.Duration, rs ...bus.Recurring) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: store, Clock: clock, Logger: quiet(),
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond, Lease: lease}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(b, log.handle); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := b.AddRecurring(r); err != nil {
			t.Fatalf("AddRecurring(%s): %v", r.Name, err)
		}
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

func every200(missed bus.MissedPolicy) bus.Recurring {
	return bus.Recurring{Name: "tick", Schedule: bus.Every(200 * time.Millisecond),
		Message: func(tick time.Time) any { return Tick{At: tick} }, Options: []bus.Option{bus.To("worker")}, Missed: missed}
}

// ticksIn returns the multiples of d in (from, to].
func ticksIn(d time.Duration, from, to time.Time) []time.Time {
	var out []time.Time
	for t := from.Truncate(d).Add(d); !t.After(to); t = t.Add(d) {
		out = append(out, t)
	}
	return out
}

// walk advances clock by step until it reached to, waiting before each
// step until the sleepers goroutines that wait on the clock (two per
// running bus: its dispatcher and its recurring loop) went to sleep, and
// after each step until the occurrences due by then (want(now)) arrived.
func walk(t *testing.T, clock *bustest.FakeClock, log *tickLog, sleepers int, step time.Duration, to time.Time, want func(now time.Time) int) {
	t.Helper()
	for clock.Now().Before(to) {
		if !clock.WaitForTimers(ctxT(t), sleepers) {
			t.Fatalf("at %v: fewer than %d goroutines went to sleep", clock.Now(), sleepers)
		}
		clock.Advance(step)
		log.waitLen(t, want(clock.Now()))
		if n, w := log.len(), want(clock.Now()); n > w {
			got, _ := log.snapshot()
			t.Fatalf("at %v: %d occurrences, want %d: %v", clock.Now().Format("15:04:05.000"), n, w, got)
		}
	}
}

func TestRecurringTwoBusesDeliverEachTickOnce(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	a := recBus(t, clock, tr, store, log, every200(bus.MissedOnce))
	b := recBus(t, clock, tr, store, log, every200(bus.MissedOnce))
	end := recT0.Add(2 * time.Second)
	walk(t, clock, log, 4, 25*time.Millisecond, end, func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	settle(t, tr, store, clock, log, a, b) // a duplicate would be stored, waiting or handled now
	ticks, at := log.snapshot()
	if want := ticksIn(200*time.Millisecond, recT0, end); !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("occurrences %v, want each tick once: %v", ticks, want)
	}
	for i := range ticks {
		if at[i].Before(ticks[i]) {
			t.Errorf("tick %v handled early, at %v", ticks[i], at[i])
		}
	}
}

// advance moves clock by step until it reached to, waiting before each
// step until sleepers goroutines went to sleep on it, and a moment after
// each for what the step woke.
func advance(t *testing.T, clock *bustest.FakeClock, sleepers int, step time.Duration, to time.Time) {
	t.Helper()
	for clock.Now().Before(to) {
		if !clock.WaitForTimers(ctxT(t), sleepers) {
			t.Fatalf("at %v: fewer than %d goroutines went to sleep", clock.Now(), sleepers)
		}
		clock.Advance(step)
		time.Sleep(2 * time.Millisecond)
	}
}

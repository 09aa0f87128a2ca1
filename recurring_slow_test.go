package bus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// slowStore is a memory persistence whose LoadRecurring takes delay of the
// fake clock, as a loaded database does: a pass over many schedules then
// lasts longer than the ticks stored ahead.
type slowStore struct {
	*bus.MemoryPersistence
	clock *bustest.FakeClock
	delay atomic.Int64 // nanoseconds
}

func (s *slowStore) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	s.clock.Advance(time.Duration(s.delay.Load()))
	return s.MemoryPersistence.LoadRecurring(ctx, name)
}

// namedTicks records the ticks handled per schedule.
type namedTicks struct {
	clock *bustest.FakeClock
	mu    sync.Mutex
	ticks map[string][]time.Time
	early []string
}

func (l *namedTicks) handle(ctx context.Context, _ Tick) error {
	env := bus.IncomingMessage(ctx)
	tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
	if err != nil {
		return bus.Unrecoverable(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	name := env.Header(bus.HeaderRecurringName)
	l.ticks[name] = append(l.ticks[name], tick)
	if now := l.clock.Now(); now.Before(tick) {
		l.early = append(l.early, fmt.Sprintf("%s %v at %v", name, tick, now))
	}
	return nil
}

// A running process whose pass over its schedules takes longer than the
// ticks it keeps stored ahead ran across the ticks in between: they are
// late, not missed, and each is still sent once.
func TestRecurringSlowPassLosesNoTick(t *testing.T) {
	t.Parallel()
	slowPass(t, false, 0)
}

// A process that starts while the others' passes are slow finds the ticks
// stored far enough ahead: its reconcile takes none of them for missed.
func TestRecurringStartBesideSlowPassesLosesNoTick(t *testing.T) {
	t.Parallel()
	slowPass(t, true, 0)
}

// A process that starts while the store grows slower than the passes
// measured so far (every read takes 400 ms instead of 150 ms) finds the
// ticks stored ahead passed: the others still run, so they are late, not
// missed, and none of them is collapsed or cancelled.
func TestRecurringStartWhileTheStoreSlowsDownLosesNoTick(t *testing.T) {
	t.Parallel()
	slowPass(t, true, 400*time.Millisecond)
}

// slowPass runs buses declaring 5 schedules of 200 ms on a store whose
// every LoadRecurring takes 150 ms of the fake clock, so a pass lasts 750
// ms while 2 ticks (400 ms) are stored ahead; with second, another bus
// starts 2 s in, and from then on every LoadRecurring takes slower when it
// is not zero. Every tick in the run is sent once, none early.
func slowPass(t *testing.T, second bool, slower time.Duration) {
	t.Helper()
	const every = 200 * time.Millisecond
	clock := bustest.NewFakeClock(recT0)
	store := &slowStore{MemoryPersistence: bus.NewMemoryPersistence(), clock: clock}
	store.delay.Store(int64(150 * time.Millisecond))
	tr := bus.NewMemoryTransport()
	log := &namedTicks{clock: clock, ticks: map[string][]time.Time{}}
	var names []string
	for i := range 5 {
		names = append(names, fmt.Sprintf("tick-%d", i))
	}
	start := func() {
		b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: store, Clock: clock,
			Logger: quiet(), Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Handle(b, log.handle); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			r := every200(bus.MissedOnce)
			r.Name = name
			if err := b.AddRecurring(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Stop(context.Background()) })
	}
	start()
	started := clock.Now() // after Start's reconcile: every schedule is stored from here on
	end := started.Add(6 * time.Second)
	// The loop's passes move the clock on by themselves: each ends after
	// the next tick. Between them (a pass that read every record with one
	// list) the clock moves a millisecond at a time.
	waitClock := func(to time.Time) {
		for deadline := time.Now().Add(20 * time.Second); clock.Now().Before(to); time.Sleep(time.Millisecond) {
			clock.Advance(time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatalf("the recurring loop's passes moved the clock to %v in 20 s, want %v", clock.Now(), to)
			}
		}
	}
	if second {
		waitClock(started.Add(2 * time.Second))
		if slower > 0 {
			store.delay.Store(int64(slower))
		}
		start()
	}
	waitClock(end)
	store.delay.Store(0)
	want := ticksIn(every, started, end.Add(-2*time.Second)) // the last passes may still be under way
	deadline := time.Now().Add(20 * time.Second)
	for {
		log.mu.Lock()
		var missing []string
		for _, name := range names {
			for _, tick := range want {
				if !slices.ContainsFunc(log.ticks[name], tick.Equal) {
					missing = append(missing, fmt.Sprintf("%s %s", name, tick.Format("15:04:05.000")))
				}
			}
		}
		log.mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ticks never sent in the %d expected (%d schedules), e.g. %v; tick-0 got %v", len(missing), len(want)*len(names), len(names), missing[:min(len(missing), 5)], log.ticks["tick-0"])
		}
		clock.Advance(10 * time.Millisecond) // lets the dispatcher hand over what is due
		time.Sleep(10 * time.Millisecond)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, name := range names {
		got := slices.Clone(log.ticks[name])
		slices.SortFunc(got, time.Time.Compare)
		for i := 1; i < len(got); i++ {
			if got[i].Equal(got[i-1]) {
				t.Errorf("%s: tick %v sent twice", name, got[i])
			}
		}
	}
	if len(log.early) > 0 {
		t.Errorf("sent before their tick: %v", log.early)
	}
}

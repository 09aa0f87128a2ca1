package bus_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// The races around a schedule's step, and the user code it calls: each
// test failed before the fix it is named after.

// recBusOn is recBus on any persistence, logging into logs (nil: quiet).
func recBusOn(t *testing.T, clock *bustest.FakeClock, tr *bus.MemoryTransport, p bus.Persistence, log *tickLog, logs *logBuffer, rs ...bus.Recurring) *bus.Bus {
	t.Helper()
	logger := quiet()
	if logs != nil {
		logger = logs.logger()
	}
	b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: p, Clock: clock, Logger: logger,
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
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

// pauseMidStep pauses the schedule it names between a step's read of the
// record and its write, once: the pause lands while the step is under way.
type pauseMidStep struct {
	*bus.MemoryPersistence
	once sync.Once
	at   time.Time
}

func (p *pauseMidStep) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if len(adv.Store) > 0 {
		p.once.Do(func() {
			if _, err := p.SetRecurringPaused(ctx, adv.Name, true, p.at); err != nil {
				panic(err)
			}
		})
	}
	return p.MemoryPersistence.AdvanceRecurring(ctx, adv)
}

func TestRecurringPauseStopsAStepUnderWay(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	store := &pauseMidStep{MemoryPersistence: bus.NewMemoryPersistence(), at: recT0}
	log := &tickLog{clock: clock}
	b := recBusOn(t, clock, bus.NewMemoryTransport(), store, log, nil, every200(bus.MissedOnce))
	if n := store.Len(); n != 0 {
		t.Fatalf("the first step stored %d occurrence(s) although the schedule was paused while it ran", n)
	}
	advance(t, clock, 2, 50*time.Millisecond, clock.Now().Add(time.Second))
	if got := log.len(); got != 0 {
		ticks, _ := log.snapshot()
		t.Fatalf("paused schedule delivered %v", ticks)
	}
	infos, err := b.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || !infos[0].Paused {
		t.Fatalf("Recurrings = %+v, %v; want it paused", infos, err)
	}
}

// An operator deletes a schedule while an old process still runs its
// definition, and a new process declares another one: the old process
// must not bring its definition back.
func TestRecurringDeleteDuringARollingDeployKeepsTheOldDefinitionOut(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	oldLogs := &logBuffer{}
	old := recBusOn(t, clock, tr, store, log, oldLogs, every200(bus.MissedOnce))
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(450*time.Millisecond), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	before := log.len()
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store, Clock: clock, SendOnly: true}, nil)
	if err := ops.DeleteRecurring(ctxT(t), "tick"); err != nil {
		t.Fatal(err)
	}
	deployed := clock.Now()
	newer := every200(bus.MissedOnce)
	newer.Schedule = bus.Every(300 * time.Millisecond)
	nb := recBus(t, clock, tr, store, log, newer)
	walk(t, clock, log, 4, 25*time.Millisecond, deployed.Add(2*time.Second), func(now time.Time) int {
		return before + len(ticksIn(300*time.Millisecond, deployed, now))
	})
	infos, err := nb.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || infos[0].Generation < 2 || infos[0].Superseded {
		t.Fatalf("new process's Recurrings = %+v, %v; want a generation after the deleted one's, not superseded", infos, err)
	}
	infos, err = old.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || !infos[0].Declared || !infos[0].Superseded || infos[0].Schedule != "every 300ms" {
		t.Fatalf("old process's Recurrings = %+v, %v; want it declared here and superseded by every 300ms", infos, err)
	}
	ticks := settle(t, tr, store, clock, log, old, nb) // a tick of the old definition would be stored, waiting or handled now
	if want := ticksIn(300*time.Millisecond, deployed, clock.Now()); !slices.EqualFunc(ticks[before:], want, time.Time.Equal) {
		t.Fatalf("after the delete and the deploy: %v, want the new definition's ticks alone: %v", ticks[before:], want)
	}
}

func TestRecurringSupersededDeclarationIsLoggedAndListed(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	oldLogs := &logBuffer{}
	old := recBusOn(t, clock, tr, store, log, oldLogs, every200(bus.MissedOnce))
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(450*time.Millisecond), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	before, deployed := log.len(), clock.Now()
	newer := every200(bus.MissedOnce)
	newer.Schedule = bus.Every(300 * time.Millisecond)
	recBus(t, clock, tr, store, log, newer)
	walk(t, clock, log, 4, 25*time.Millisecond, deployed.Add(3*time.Second), func(now time.Time) int {
		return before + len(ticksIn(300*time.Millisecond, deployed, now))
	})
	infos, err := old.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || !infos[0].Superseded || !infos[0].Declared {
		t.Fatalf("Recurrings of the process that lost = %+v, %v; want Superseded", infos, err)
	}
	out := oldLogs.String()
	if n := strings.Count(out, "recurring schedule superseded"); n != 1 ||
		!strings.Contains(out, "level=WARN") || !strings.Contains(out, "every 200ms") || !strings.Contains(out, "every 300ms") {
		t.Fatalf("log of the process that lost (%d warnings), want one WARN naming both definitions:\n%s", n, out)
	}
}

// failingTicks builds a Tick, except for the ticks in bad, where it
// panics (panic true) or returns nil.
func failingTicks(panics bool, bad ...time.Time) func(time.Time) any {
	return func(tick time.Time) any {
		if slices.ContainsFunc(bad, tick.Equal) {
			if panics {
				panic("report generator broke")
			}
			return nil
		}
		return Tick{At: tick}
	}
}

func testRecurringFailingMessage(t *testing.T, panics bool) {
	clock := bustest.NewFakeClock(recT0)
	base := recT0.Truncate(200 * time.Millisecond)
	bad := []time.Time{base.Add(400 * time.Millisecond), base.Add(600 * time.Millisecond)}
	r := every200(bus.MissedOnce)
	r.Message = failingTicks(panics, bad...)
	log := &tickLog{clock: clock}
	logs := &logBuffer{}
	b := recBusOn(t, clock, bus.NewMemoryTransport(), bus.NewMemoryPersistence(), log, logs, r)
	end := recT0.Add(2 * time.Second)
	want := func(now time.Time) []time.Time {
		return slices.DeleteFunc(ticksIn(200*time.Millisecond, recT0, now), func(t time.Time) bool { return slices.ContainsFunc(bad, t.Equal) })
	}
	walk(t, clock, log, 2, 25*time.Millisecond, end, func(now time.Time) int { return len(want(now)) })
	if ticks, _ := log.snapshot(); !slices.EqualFunc(ticks, want(end), time.Time.Equal) {
		t.Fatalf("occurrences %v, want every tick but the failing ones: %v", ticks, want(end))
	}
	if m := b.Metrics().RecurringFailed; m != uint64(len(bad)) {
		t.Errorf("Metrics().RecurringFailed = %d, want %d", m, len(bad))
	}
	out := logs.String()
	for _, tick := range bad {
		if !strings.Contains(out, tick.Format(time.RFC3339Nano)) || !strings.Contains(out, "recurring=tick") {
			t.Errorf("no log line naming the schedule and tick %v:\n%s", tick, out)
		}
	}
}

func TestRecurringPanickingMessageFailsOnlyItsTick(t *testing.T) {
	t.Parallel()
	testRecurringFailingMessage(t, true)
}

func TestRecurringNilMessageFailsOnlyItsTickAndTheScheduleGoesOn(t *testing.T) {
	t.Parallel()
	testRecurringFailingMessage(t, false)
}

func TestRecurringTwoTriggersInOneMillisecondAreTwoOccurrences(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	// The triggers come from a bus that does not dispatch, before any
	// dispatcher runs: all of them are stored when the worker starts.
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store, Clock: clock, SendOnly: true}, nil)
	if err := ops.SetRecurring(ctxT(t), bus.RecurringSpec{Name: "tick", Schedule: "@every 1h", Message: Tick{},
		Options: []bus.Option{bus.To("worker")}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ops.TriggerRecurring(ctxT(t), "tick"); err != nil {
			t.Fatal(err)
		}
	}
	// A keyed trigger retried stores one occurrence.
	for range 3 {
		if err := ops.TriggerRecurring(ctxT(t), "tick", bus.TriggerKey("run-42")); err != nil {
			t.Fatal(err)
		}
	}
	b := recBus(t, clock, tr, store, log)
	log.waitLen(t, 3)
	if ticks := settle(t, tr, store, clock, log, b); len(ticks) != 3 { // a duplicate would be stored, waiting or handled now
		n := len(ticks)
		t.Fatalf("%d occurrences %v, want 3: two triggers and one keyed trigger retried", n, ticks)
	}
	if err := ops.TriggerRecurring(ctxT(t), "tick", bus.TriggerKey("")); !errors.Is(err, bus.ErrInvalidRecurring) {
		t.Errorf("TriggerKey(\"\") = %v, want ErrInvalidRecurring", err)
	}
}

func TestRecurringTriggerWhoseMessagePanicsReturnsATickError(t *testing.T) {
	t.Parallel()
	r := every200(bus.MissedOnce)
	r.Schedule = bus.Every(time.Hour)
	r.Message = func(time.Time) any { panic("no") }
	b := recBusOn(t, bustest.NewFakeClock(recT0), bus.NewMemoryTransport(), bus.NewMemoryPersistence(), &tickLog{}, nil, r)
	var te *bus.RecurringTickError
	if err := b.TriggerRecurring(ctxT(t), "tick"); !errors.As(err, &te) || te.Name != "tick" || !errors.Is(err, bus.ErrInvalidMessage) {
		t.Fatalf("TriggerRecurring with a panicking Message = %v, want a *RecurringTickError wrapping ErrInvalidMessage", err)
	}
}

func TestRecurringEveryZeroOrNegativeSaysTheIntervalMustBePositive(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -5 * time.Second} {
		b, err := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		err = b.AddRecurring(bus.Recurring{Name: "x", Schedule: bus.Every(d), Message: func(time.Time) any { return Tick{} }})
		var re *bus.RecurringError
		if !errors.As(err, &re) || re.Field != "Schedule" || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("Every(%v) = %v, want a *RecurringError saying the interval must be positive", d, err)
		}
	}
}

// txCarrying is a memory persistence whose callers can pass a
// transaction of their own in a ctx, as postgres.WithTx does.
type txCarrying struct{ *bus.MemoryPersistence }

type callerTxKey struct{}

func (txCarrying) CarriesTx(ctx context.Context) bool { return ctx.Value(callerTxKey{}) != nil }

func TestRecurringCallsWithTheCallersTxAreRefused(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	r := every200(bus.MissedOnce)
	b := recBusOn(t, clock, bus.NewMemoryTransport(), txCarrying{bus.NewMemoryPersistence()}, &tickLog{clock: clock}, nil, r)
	ctx := context.WithValue(ctxT(t), callerTxKey{}, true)
	_, listErr := b.Recurrings(ctx)
	_, backlogErr := b.ScheduledBacklog(ctx)
	for call, err := range map[string]error{
		"TriggerRecurring": b.TriggerRecurring(ctx, "tick"),
		"PauseRecurring":   b.PauseRecurring(ctx, "tick"),
		"ResumeRecurring":  b.ResumeRecurring(ctx, "tick"),
		"DeleteRecurring":  b.DeleteRecurring(ctx, "tick"),
		"Recurrings":       listErr,
		"ScheduledBacklog": backlogErr,
	} {
		if !errors.Is(err, bus.ErrCannotJoinTx) {
			t.Errorf("%s with the caller's transaction = %v, want ErrCannotJoinTx", call, err)
		}
	}
	if infos, err := b.Recurrings(ctxT(t)); err != nil || len(infos) != 1 || infos[0].Paused {
		t.Fatalf("after the refused calls: %+v, %v; want the schedule running", infos, err)
	}
}

// OverlapSkip: an occurrence that arrives while the previous one of its
// schedule is still being handled is skipped, and the schedule goes on.
func TestRecurringOverlapSkipSkipsATickWhileThePreviousRuns(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	base := recT0.Truncate(200 * time.Millisecond)
	first := base.Add(200 * time.Millisecond)
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []time.Time
	b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: store, Clock: clock, Logger: quiet(), Concurrency: 4,
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(b, func(ctx context.Context, m Tick) error {
		tick, _ := time.Parse(time.RFC3339Nano, bus.IncomingMessage(ctx).Header(bus.HeaderRecurringTick))
		if tick.Equal(first) {
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, tick)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := every200(bus.MissedOnce)
	r.Policy.Overlap, r.Policy.OverlapTimeout = bus.OverlapSkip, time.Minute
	if err := b.AddRecurring(r); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	advance(t, clock, 2, 25*time.Millisecond, base.Add(450*time.Millisecond)) // 200 runs (blocked), 400 arrives
	drivertest.Eventually(t, 20*time.Second, func() bool { return b.Metrics().RecurringSkipped >= 1 }, "a skipped tick")
	if n := b.Metrics().RecurringSkipped; n != 1 {
		t.Fatalf("Metrics().RecurringSkipped = %d, want 1: the tick of 400ms arrived while 200ms ran", n)
	}
	close(release)
	advance(t, clock, 2, 25*time.Millisecond, base.Add(650*time.Millisecond))
	drivertest.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 2
	}, "two ticks handled")
	settle(t, tr, store, clock, nil, b)
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Time{first, base.Add(600 * time.Millisecond)}; !slices.EqualFunc(handled, want, time.Time.Equal) {
		t.Fatalf("handled %v, want %v: the overlapping tick skipped, the next one handled", handled, want)
	}
}

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// opsBus is a send-only bus on store, as an admin process or a request
// handler that creates schedules would run.
func opsBus(t *testing.T, clock *bustest.FakeClock, tr *bus.MemoryTransport, store bus.Persistence) *bus.Bus {
	t.Helper()
	return bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store, Clock: clock, SendOnly: true}, nil)
}

func tickSpec(name, every string) bus.RecurringSpec {
	return bus.RecurringSpec{Name: name, Schedule: "@every " + every, Message: Tick{}, Options: []bus.Option{bus.To("worker")}}
}

func TestSetRecurringRunsOnEveryDispatcherEachTickOnce(t *testing.T) {
	t.Parallel()
	clock, tr, store, log, w := recWorld(t)
	w2 := recBus(t, clock, tr, store, log)
	ops := opsBus(t, clock, tr, store)
	if err := ops.SetRecurring(ctxT(t), tickSpec("tenant-a", "200ms")); err != nil {
		t.Fatal(err)
	}
	end := recT0.Add(2 * time.Second)
	walk(t, clock, log, 4, 25*time.Millisecond, end, func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	settle(t, tr, store, clock, log, w, w2) // a duplicate would be stored, waiting or handled now
	ticks, at := log.snapshot()
	if want := ticksIn(200*time.Millisecond, recT0, end); !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("occurrences %v, want each tick once: %v", ticks, want)
	}
	for i := range ticks {
		if at[i].Before(ticks[i]) {
			t.Errorf("tick %v handled early, at %v", ticks[i], at[i])
		}
	}
	infos, err := ops.ListRecurrings(ctxT(t), bus.RecurringFilter{})
	if err != nil || len(infos) != 1 || !infos[0].Runtime || infos[0].Declared || infos[0].Schedule != "@every 200ms" {
		t.Fatalf("ListRecurrings = %+v, %v; want the runtime schedule", infos, err)
	}
}

func TestSetRecurringAgainKeepsOrReplacesTheDefinition(t *testing.T) {
	t.Parallel()
	clock, tr, store, log, w := recWorld(t)
	ops := opsBus(t, clock, tr, store)
	if err := ops.SetRecurring(ctxT(t), tickSpec("r", "200ms")); err != nil {
		t.Fatal(err)
	}
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(450*time.Millisecond), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	if err := ops.SetRecurring(ctxT(t), tickSpec("r", "200ms")); err != nil { // the same: nothing changes
		t.Fatal(err)
	}
	if infos, _ := ops.ListRecurrings(ctxT(t), bus.RecurringFilter{}); len(infos) != 1 || infos[0].Generation != 1 {
		t.Fatalf("the same definition set again: %+v, want generation 1", infos)
	}
	before, changed := log.len(), clock.Now()
	if err := ops.SetRecurring(ctxT(t), tickSpec("r", "300ms")); err != nil {
		t.Fatal(err)
	}
	walk(t, clock, log, 2, 25*time.Millisecond, changed.Add(2*time.Second), func(now time.Time) int {
		return before + len(ticksIn(300*time.Millisecond, changed, now))
	})
	ticks, _ := log.snapshot()
	if want := ticksIn(300*time.Millisecond, changed, clock.Now()); !slices.EqualFunc(ticks[before:], want, time.Time.Equal) {
		t.Fatalf("after the change: %v, want the new definition's ticks alone: %v", ticks[before:], want)
	}
	if err := ops.DeleteRecurring(ctxT(t), "r"); err != nil {
		t.Fatal(err)
	}
	n := log.len()
	advance(t, clock, 1, 50*time.Millisecond, clock.Now().Add(2*time.Second)) // the dispatcher; the recurring loop has no schedule left
	// One a dispatcher already held may go out.
	if got := len(settle(t, tr, store, clock, log, w)); got > n+1 {
		t.Fatalf("%d occurrences after the delete, want at most 1", got-n)
	}
}

func TestSetRecurringRefusesBadSpecs(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "ops", SendOnly: true}, nil)
	ok := tickSpec("ok", "1m")
	with := func(f func(s *bus.RecurringSpec)) bus.RecurringSpec { s := ok; f(&s); return s }
	for name, c := range map[string]struct {
		spec  bus.RecurringSpec
		field string
	}{
		"bad name":       {with(func(s *bus.RecurringSpec) { s.Name = "a b" }), "Name"},
		"no message":     {with(func(s *bus.RecurringSpec) { s.Message = nil }), "Message"},
		"cron text":      {with(func(s *bus.RecurringSpec) { s.Schedule = "0 9 * * *" }), "Schedule"},
		"every zero":     {with(func(s *bus.RecurringSpec) { s.Schedule = "@every 0s" }), "Schedule"},
		"DeliverAfter":   {with(func(s *bus.RecurringSpec) { s.Options = append(s.Options, bus.DeliverAfter(time.Second)) }), "Options"},
		"bad jitter":     {with(func(s *bus.RecurringSpec) { s.Policy.Jitter = -time.Second }), "Policy.Jitter"},
		"end before":     {with(func(s *bus.RecurringSpec) { s.Policy.Start, s.Policy.End = recT0, recT0.Add(-time.Hour) }), "Policy.End"},
		"negative runs":  {with(func(s *bus.RecurringSpec) { s.Policy.MaxRuns = -1 }), "Policy.MaxRuns"},
		"unknown policy": {with(func(s *bus.RecurringSpec) { s.Missed = 7 }), "Missed"},
	} {
		var re *bus.RecurringError
		if err := b.SetRecurring(ctxT(t), c.spec); !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%s: SetRecurring = %v, want a *RecurringError on %s", name, err, c.field)
		}
	}
	if infos, err := b.Recurrings(ctxT(t)); err != nil || len(infos) != 0 {
		t.Errorf("refused specs stored %+v, %v", infos, err)
	}
}

func TestListRecurringsPagesInNameOrder(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "ops", SendOnly: true}, nil)
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("tenant-%03d", i)
		want = append(want, name)
		if err := b.SetRecurring(ctxT(t), tickSpec(name, "1h")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetRecurring(ctxT(t), tickSpec("other", "1h")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for after := ""; ; {
		page, err := b.ListRecurrings(ctxT(t), bus.RecurringFilter{Prefix: "tenant-", After: after, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range page {
			got = append(got, info.Name)
		}
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].Name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages = %v, want %v", got, want)
	}
	if _, err := b.ListRecurrings(ctxT(t), bus.RecurringFilter{Limit: 1001}); !errors.Is(err, bus.ErrInvalidRecurring) {
		t.Errorf("Limit 1001 = %v, want ErrInvalidRecurring", err)
	}
}

func TestRecurringPolicyJitterShiftsEveryTickByOneOffset(t *testing.T) {
	t.Parallel()
	clock, tr, store, log, _ := recWorld(t)
	spec := tickSpec("jittered", "200ms")
	spec.Policy.Jitter = 150 * time.Millisecond
	if err := opsBus(t, clock, tr, store).SetRecurring(ctxT(t), spec); err != nil {
		t.Fatal(err)
	}
	advance(t, clock, 2, 10*time.Millisecond, recT0.Add(2*time.Second))
	log.waitLen(t, 9)
	ticks, at := log.snapshot()
	off := ticks[0].Sub(ticks[0].Truncate(200 * time.Millisecond))
	if off <= 0 || off >= 150*time.Millisecond || off%time.Millisecond != 0 {
		t.Fatalf("offset %v, want whole milliseconds in (0, 150ms)", off)
	}
	for i, tk := range ticks {
		if tk.Sub(tk.Truncate(200*time.Millisecond)) != off || at[i].Before(tk) {
			t.Fatalf("tick %v (handled at %v) is not shifted by the schedule's offset %v, or early: %v", tk, at[i], off, ticks)
		}
		if i > 0 && tk.Sub(ticks[i-1]) != 200*time.Millisecond {
			t.Fatalf("ticks %v: want one every 200ms", ticks)
		}
	}
}

func TestRecurringPolicyStartEndAndMaxRuns(t *testing.T) {
	t.Parallel()
	clock, tr, store, log, w := recWorld(t)
	ops := opsBus(t, clock, tr, store)
	base := recT0.Truncate(200 * time.Millisecond)
	window := tickSpec("window", "200ms")
	window.Policy.Start, window.Policy.End = base.Add(600*time.Millisecond), base.Add(time.Second)
	runs := tickSpec("runs", "200ms")
	runs.Policy.MaxRuns = 2
	for _, s := range []bus.RecurringSpec{window, runs} {
		if err := ops.SetRecurring(ctxT(t), s); err != nil {
			t.Fatal(err)
		}
	}
	// window: 600, 800, 1000; runs: 200, 400.
	want := []time.Time{base.Add(200 * time.Millisecond), base.Add(400 * time.Millisecond), base.Add(600 * time.Millisecond),
		base.Add(800 * time.Millisecond), base.Add(time.Second)}
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(2*time.Second), func(now time.Time) int {
		return len(slices.DeleteFunc(slices.Clone(want), func(t time.Time) bool { return t.After(now) }))
	})
	ticks := settle(t, tr, store, clock, log, w)
	slices.SortFunc(ticks, time.Time.Compare)
	if !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("occurrences %v, want %v", ticks, want)
	}
}

func TestRecurringPolicyCatchUpSkipsMissedTicksPastTheWindow(t *testing.T) {
	t.Parallel()
	r := every200(bus.MissedAll)
	r.Policy.CatchUp = 500 * time.Millisecond
	o := outage(t, r, outageGap)
	before, now := o.before, o.clock.Now()
	inWindow := ticksIn(200*time.Millisecond, now.Add(-500*time.Millisecond), now)
	o.log.waitLen(t, len(before)+len(inWindow))
	ticks := o.settle(t)
	got := slices.Clone(ticks[len(before):])
	slices.SortFunc(got, time.Time.Compare)
	if !slices.EqualFunc(got, inWindow, time.Time.Equal) {
		t.Fatalf("caught up %v, want the missed ticks of the last 500ms alone: %v", got, inWindow)
	}
}

func TestBackfillRecurringSendsEachTickOfTheRangeOnce(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	ops := opsBus(t, clock, tr, store)
	if err := ops.SetRecurring(ctxT(t), tickSpec("hourly", "1h")); err != nil {
		t.Fatal(err)
	}
	from := recT0.Add(-3 * time.Hour).Truncate(time.Hour)
	// Repeated while its occurrences are stored (no dispatcher runs yet), a
	// backfill stores nothing twice.
	for range 2 {
		if err := ops.BackfillRecurring(ctxT(t), "hourly", from, recT0); err != nil {
			t.Fatal(err)
		}
	}
	b := recBus(t, clock, tr, store, log)
	log.waitLen(t, 4)
	ticks := settle(t, tr, store, clock, log, b)
	slices.SortFunc(ticks, time.Time.Compare)
	want := []time.Time{from, from.Add(time.Hour), from.Add(2 * time.Hour), from.Add(3 * time.Hour)} // [09:00, 12:00:00.05)
	if !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("backfilled %v, want %v", ticks, want)
	}
	if err := ops.BackfillRecurring(ctxT(t), "hourly", from, from.Add(20000*time.Hour)); !errors.Is(err, bus.ErrInvalidRecurring) {
		t.Errorf("a range of 20,000 ticks = %v, want ErrInvalidRecurring", err)
	}
	if err := ops.BackfillRecurring(ctxT(t), "nope", from, recT0); !errors.Is(err, bus.ErrUnknownRecurring) {
		t.Errorf("backfill of an unknown name = %v, want ErrUnknownRecurring", err)
	}
}

// Two processes set one name with two definitions at once: the schedule
// ends with one of them, and only its ticks are sent.
func TestSetRecurringRacingSetLeavesOneDefinition(t *testing.T) {
	t.Parallel()
	clock, tr, store, log, _ := recWorld(t)
	a, b := opsBus(t, clock, tr, store), opsBus(t, clock, tr, store)
	var wg sync.WaitGroup
	for _, c := range []struct {
		b     *bus.Bus
		every string
	}{{a, "1s"}, {b, "1500ms"}} { // no tick within the look-ahead: none is held when the other replaces it
		wg.Go(func() {
			if err := c.b.SetRecurring(ctxT(t), tickSpec("raced", c.every)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	infos, err := a.ListRecurrings(ctxT(t), bus.RecurringFilter{})
	if err != nil || len(infos) != 1 {
		t.Fatalf("ListRecurrings = %+v, %v", infos, err)
	}
	d := map[string]time.Duration{"@every 1s": time.Second, "@every 1500ms": 1500 * time.Millisecond}[infos[0].Schedule]
	walk(t, clock, log, 2, 50*time.Millisecond, recT0.Add(5*time.Second), func(now time.Time) int { return len(ticksIn(d, recT0, now)) })
	ticks, _ := log.snapshot()
	if want := ticksIn(d, recT0, clock.Now()); !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("occurrences %v, want the ticks of %s alone: %v", ticks, infos[0].Schedule, want)
	}
}

// "@every" always means bus.Every, whatever Config.ParseSchedule is (a
// cron parser's @every would count from each process's own last tick);
// other text goes to ParseSchedule.
func TestSetRecurringEveryIsEpochAlignedWhateverTheParser(t *testing.T) {
	t.Parallel()
	var asked []string
	b := bustest.StartBus(t, bus.Config{Endpoint: "ops", SendOnly: true, ParseSchedule: func(s string) (bus.Schedule, error) {
		asked = append(asked, s)
		return bus.Every(time.Hour), nil
	}}, nil)
	if err := b.SetRecurring(ctxT(t), tickSpec("a", "7s")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetRecurring(ctxT(t), bus.RecurringSpec{Name: "b", Schedule: "0 9 * * *", Message: Tick{}, Options: []bus.Option{bus.To("worker")}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []string{"0 9 * * *"}) {
		t.Fatalf("ParseSchedule was asked %q, want the cron text alone", asked)
	}
	infos, err := b.ListRecurrings(ctxT(t), bus.RecurringFilter{Prefix: "a"})
	if err != nil || len(infos) != 1 || infos[0].Next.UnixNano()%int64(7*time.Second) != 0 {
		t.Fatalf("ListRecurrings = %+v, %v; want the next tick on a multiple of 7 s since the epoch", infos, err)
	}
}

// Schedules that differ by their names alone (one per tenant, the same
// message) each tick on their own.
func TestSetRecurringSchedulesAlikeButForTheirNamesEachTick(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	var mu sync.Mutex
	got := map[string][]time.Time{}
	b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: store, Clock: clock, Logger: quiet(),
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(b, func(ctx context.Context, _ Tick) error {
		env := bus.IncomingMessage(ctx)
		tick, _ := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
		mu.Lock()
		defer mu.Unlock()
		got[env.Header(bus.HeaderRecurringName)] = append(got[env.Header(bus.HeaderRecurringName)], tick)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	for _, name := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		if err := b.SetRecurring(ctxT(t), tickSpec(name, "200ms")); err != nil {
			t.Fatal(err)
		}
	}
	end := recT0.Add(2 * time.Second)
	advance(t, clock, 2, 25*time.Millisecond, end)
	want := ticksIn(200*time.Millisecond, recT0, end)
	drivertest.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["tenant-a"]) >= len(want) && len(got["tenant-b"]) >= len(want) && len(got["tenant-c"]) >= len(want)
	}, "%d ticks of each schedule", len(want))
	settle(t, tr, store, clock, nil, b)
	mu.Lock()
	defer mu.Unlock()
	for name, ticks := range got {
		slices.SortFunc(ticks, time.Time.Compare)
		if !slices.EqualFunc(ticks, want, time.Time.Equal) {
			t.Errorf("%s: %v, want each tick once: %v", name, ticks, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("ticks of %d schedules, want 3", len(got))
	}
}

// A runtime schedule's ticks start when it is set, not when a dispatcher
// first steps it: ticks that fall before a dispatcher polls are late, and
// each is sent.
func TestSetRecurringTicksBeforeTheFirstStepAreLateNotMissed(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	if err := opsBus(t, clock, tr, store).SetRecurring(ctxT(t), tickSpec("r", "200ms")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(700 * time.Millisecond) // no dispatcher runs yet
	b := recBus(t, clock, tr, store, log)
	want := ticksIn(200*time.Millisecond, recT0, recT0.Add(700*time.Millisecond))
	log.waitLen(t, len(want))
	ticks := settle(t, tr, store, clock, log, b)
	slices.SortFunc(ticks, time.Time.Compare)
	if !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("occurrences %v, want every tick since the schedule was set: %v", ticks, want)
	}
}

// recWorld starts a bus that dispatches and handles Tick on a new memory
// transport and store, at recT0 on a fake clock, and returns it last.
func recWorld(t *testing.T) (*bustest.FakeClock, *bus.MemoryTransport, *bus.MemoryPersistence, *tickLog, *bus.Bus) {
	t.Helper()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	b := recBus(t, clock, tr, store, log)
	return clock, tr, store, log, b
}

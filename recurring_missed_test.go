package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// outageGap is an outage in which ticks are missed: longer than the
// grace period after the liveness mark (the poll interval and the default
// 30 s lease), within which a process is taken for behind, not stopped.
const outageGap = 40 * time.Second

// outageRun is what outage leaves: the log, the clock, the transport, the
// store, the bus started after the outage, and the ticks handled before.
type outageRun struct {
	log    *tickLog
	clock  *bustest.FakeClock
	tr     *bus.MemoryTransport
	store  *bus.MemoryPersistence
	bus    *bus.Bus
	before []time.Time
}

// settle settles the restarted bus (see settle).
func (o *outageRun) settle(t *testing.T) []time.Time {
	t.Helper()
	return settle(t, o.tr, o.store, o.clock, o.log, o.bus)
}

// settle stops the buses that handle into log (nil: none), which waits
// for the handlers under way, and fails unless nothing is left to deliver
// by the clock's now: no message waiting in tr (queue "worker") and no row
// in store due by then. It returns the ticks handled, which are then all
// that arrive by now: with the clock still, the test need not wait in
// real time for an occurrence that might.
func settle(t *testing.T, tr *bus.MemoryTransport, store *bus.MemoryPersistence, clock *bustest.FakeClock, log *tickLog, buses ...*bus.Bus) []time.Time {
	t.Helper()
	for _, b := range buses {
		if err := b.Stop(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.Len("worker"); n > 0 {
		t.Fatalf("%d messages still waiting in the transport", n)
	}
	rows, err := store.ListScheduled(ctxT(t), bus.ScheduledQuery{DueBefore: clock.Now().Add(time.Nanosecond)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) > 0 {
		t.Fatalf("%d rows due by %v still stored when the buses stopped, the first due %v", len(rows), clock.Now(), rows[0].DueAt)
	}
	if log == nil {
		return nil
	}
	ticks, _ := log.snapshot()
	return ticks
}

// outage runs two buses declaring r for a second, stops both, lets gap
// pass with no process running, and starts one bus again.
func outage(t *testing.T, r bus.Recurring, gap time.Duration) *outageRun {
	t.Helper()
	return outageLease(t, r, gap, 0)
}

// outageLease is outage with the buses' Dispatcher.Lease set (0: the
// default), which with the poll interval makes the grace period.
func outageLease(t *testing.T, r bus.Recurring, gap, lease time.Duration) *outageRun {
	t.Helper()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	a := recBusLease(t, clock, tr, store, log, lease, r)
	b := recBusLease(t, clock, tr, store, log, lease, r)
	walk(t, clock, log, 4, 25*time.Millisecond, recT0.Add(time.Second), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	for _, x := range []*bus.Bus{a, b} {
		if err := x.Stop(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := log.snapshot()
	if store.Len() == 0 {
		t.Fatal("no occurrence stored ahead when the buses stopped")
	}
	if n := tr.Len("worker"); n > 0 {
		t.Fatalf("%d messages left in the transport when the buses stopped", n)
	}
	clock.Advance(gap) // nobody runs
	c := recBusLease(t, clock, tr, store, log, lease, r)
	return &outageRun{log: log, clock: clock, tr: tr, store: store, bus: c, before: before}
}

// Two buses in one process share a memory store and declare Every(200ms);
// both stop for a second, one starts again. With a lease of 300 ms the
// grace period (poll interval + lease) is shorter than the stop, so the
// ticks of that second were missed, and MissedOnce sends exactly one
// occurrence for them: the latest.
func TestRecurringTwoBusesStoppedForASecondCatchUpOnce(t *testing.T) {
	t.Parallel()
	o := outageLease(t, every200(bus.MissedOnce), time.Second, 300*time.Millisecond)
	before := o.before
	o.log.waitLen(t, len(before)+1)
	ticks := o.settle(t)
	latest := o.clock.Now().Truncate(200 * time.Millisecond)
	if len(ticks) != len(before)+1 || !ticks[len(before)].Equal(latest) {
		t.Fatalf("after a second's stop: %v, want %v followed by one occurrence for the latest missed tick %v", ticks, before, latest)
	}
	for i := 1; i < len(before); i++ {
		if before[i].Equal(before[i-1]) {
			t.Fatalf("tick %v handled twice before the stop: %v", before[i], before)
		}
	}
}

func TestRecurringMissedOnceSendsOneOccurrenceForTheGap(t *testing.T) {
	t.Parallel()
	o := outage(t, every200(bus.MissedOnce), outageGap)
	log, clock, before := o.log, o.clock, o.before
	latest := clock.Now().Truncate(200 * time.Millisecond)
	// The schedule goes on from the next tick.
	from := clock.Now()
	walk(t, clock, log, 2, 25*time.Millisecond, from.Add(time.Second), func(now time.Time) int {
		return len(before) + 1 + len(ticksIn(200*time.Millisecond, from, now))
	})
	ticks := o.settle(t)
	want := slices.Concat(before, []time.Time{latest}, ticksIn(200*time.Millisecond, from, clock.Now()))
	if !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("after the outage: %v, want %v: one occurrence for the latest missed tick %v, then each tick", ticks, want, latest)
	}
}

func TestRecurringMissedAllSendsEveryMissedTick(t *testing.T) {
	t.Parallel()
	o := outage(t, every200(bus.MissedAll), outageGap)
	before := o.before
	missed := ticksIn(200*time.Millisecond, before[len(before)-1], o.clock.Now())
	o.log.waitLen(t, len(before)+len(missed))
	ticks := o.settle(t)
	got := slices.Clone(ticks[len(before):])
	slices.SortFunc(got, time.Time.Compare)
	if !slices.EqualFunc(got, missed, time.Time.Equal) {
		t.Fatalf("caught up %v, want every missed tick once: %v", got, missed)
	}
}

func TestRecurringMissedSkipSendsNoneAndCancelsStoredOnes(t *testing.T) {
	t.Parallel()
	o := outage(t, every200(bus.MissedSkip), outageGap)
	log, clock, store, before := o.log, o.clock, o.store, o.before
	if store.Len() != 2 {
		t.Errorf("%d rows stored, want the 2 next ticks alone", store.Len())
	}
	from := clock.Now()
	walk(t, clock, log, 2, 25*time.Millisecond, from.Add(time.Second), func(now time.Time) int {
		return len(before) + len(ticksIn(200*time.Millisecond, from, now))
	})
	ticks := o.settle(t)
	if want := slices.Concat(before, ticksIn(200*time.Millisecond, from, clock.Now())); !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("after the outage: %v, want nothing for the gap, then each tick: %v", ticks, want)
	}
}

// A stop shorter than a tick misses nothing: the occurrence stored for the
// tick that passed is the one MissedOnce sends.
func TestRecurringShortStopSendsTheStoredTickOnce(t *testing.T) {
	t.Parallel()
	o := outage(t, every200(bus.MissedOnce), 100*time.Millisecond)
	before := o.before
	want := len(before) + len(ticksIn(200*time.Millisecond, before[len(before)-1], o.clock.Now()))
	o.log.waitLen(t, want)
	if ticks := o.settle(t); len(ticks) != want {
		t.Fatalf("after a short stop: %v, want %d occurrences", ticks, want)
	}
}

// The occurrence after a tick is stored before the tick is handed over:
// a process killed while handling it leaves the next one in the store.
func TestRecurringNextTickIsStoredBeforeTheCurrentIsHandedOver(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: store, Clock: clock, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stored := make(chan int, 100)
	_ = bus.Handle(b, func(ctx context.Context, m Tick) error {
		// The rows due after this tick, as the handler sees it.
		rows, err := store.ListScheduled(ctx, bus.ScheduledQuery{DueAfter: m.At.Add(time.Millisecond)})
		if err != nil {
			return err
		}
		stored <- len(rows)
		return log.handle(ctx, m)
	})
	if err := b.AddRecurring(every200(bus.MissedOnce)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(time.Second), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	close(stored)
	for n := range stored {
		if n < 1 {
			t.Fatal("a tick was handled with no later tick stored, want the next tick stored before it")
		}
	}
}

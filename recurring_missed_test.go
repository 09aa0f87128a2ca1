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

// outage runs two buses declaring r for a second, stops both, lets gap
// pass with no process running, and starts one bus again. It returns the
// log, the clock, the store, and the ticks handled before the outage.
func outage(t *testing.T, r bus.Recurring, gap time.Duration) (*tickLog, *bustest.FakeClock, *bus.MemoryPersistence, []time.Time) {
	t.Helper()
	return outageLease(t, r, gap, 0)
}

// outageLease is outage with the buses' Dispatcher.Lease set (0: the
// default), which with the poll interval makes the grace period.
func outageLease(t *testing.T, r bus.Recurring, gap, lease time.Duration) (*tickLog, *bustest.FakeClock, *bus.MemoryPersistence, []time.Time) {
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
	clock.Advance(gap) // nobody runs
	recBusLease(t, clock, tr, store, log, lease, r)
	return log, clock, store, before
}

// Two buses in one process share a memory store and declare Every(200ms);
// both stop for a second, one starts again. With a lease of 300 ms the
// grace period (poll interval + lease) is shorter than the stop, so the
// ticks of that second were missed, and MissedOnce sends exactly one
// occurrence for them: the latest.
func TestRecurringTwoBusesStoppedForASecondCatchUpOnce(t *testing.T) {
	t.Parallel()
	log, clock, _, before := outageLease(t, every200(bus.MissedOnce), time.Second, 300*time.Millisecond)
	log.waitLen(t, len(before)+1)
	time.Sleep(200 * time.Millisecond) // another catch-up would show up now
	ticks, _ := log.snapshot()
	latest := clock.Now().Truncate(200 * time.Millisecond)
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
	log, clock, _, before := outage(t, every200(bus.MissedOnce), outageGap)
	log.waitLen(t, len(before)+1)
	time.Sleep(100 * time.Millisecond) // another catch-up would show up now
	ticks, _ := log.snapshot()
	latest := clock.Now().Truncate(200 * time.Millisecond)
	if len(ticks) != len(before)+1 || !ticks[len(before)].Equal(latest) {
		t.Fatalf("after the outage: %v, want %v followed by one occurrence for the latest missed tick %v", ticks, before, latest)
	}
	// The schedule goes on from the next tick.
	from := clock.Now()
	walk(t, clock, log, 2, 25*time.Millisecond, from.Add(time.Second), func(now time.Time) int {
		return len(before) + 1 + len(ticksIn(200*time.Millisecond, from, now))
	})
}

func TestRecurringMissedAllSendsEveryMissedTick(t *testing.T) {
	t.Parallel()
	log, clock, _, before := outage(t, every200(bus.MissedAll), outageGap)
	missed := ticksIn(200*time.Millisecond, before[len(before)-1], clock.Now())
	log.waitLen(t, len(before)+len(missed))
	time.Sleep(100 * time.Millisecond)
	ticks, _ := log.snapshot()
	got := slices.Clone(ticks[len(before):])
	slices.SortFunc(got, time.Time.Compare)
	if !slices.EqualFunc(got, missed, time.Time.Equal) {
		t.Fatalf("caught up %v, want every missed tick once: %v", got, missed)
	}
}

func TestRecurringMissedSkipSendsNoneAndCancelsStoredOnes(t *testing.T) {
	t.Parallel()
	log, clock, store, before := outage(t, every200(bus.MissedSkip), outageGap)
	time.Sleep(100 * time.Millisecond)
	if n := log.len(); n != len(before) {
		ticks, _ := log.snapshot()
		t.Fatalf("after the outage: %v, want nothing beyond %v", ticks, before)
	}
	if store.Len() != 2 {
		t.Errorf("%d rows stored, want the 2 next ticks alone", store.Len())
	}
	from := clock.Now()
	walk(t, clock, log, 2, 25*time.Millisecond, from.Add(time.Second), func(now time.Time) int {
		return len(before) + len(ticksIn(200*time.Millisecond, from, now))
	})
}

// A stop shorter than a tick misses nothing: the occurrence stored for the
// tick that passed is the one MissedOnce sends.
func TestRecurringShortStopSendsTheStoredTickOnce(t *testing.T) {
	t.Parallel()
	log, clock, _, before := outage(t, every200(bus.MissedOnce), 100*time.Millisecond)
	want := len(before) + len(ticksIn(200*time.Millisecond, before[len(before)-1], clock.Now()))
	log.waitLen(t, want)
	time.Sleep(100 * time.Millisecond)
	if n := log.len(); n != want {
		ticks, _ := log.snapshot()
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

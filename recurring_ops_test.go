package bus_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestRecurringPauseResumeAndTriggerAreSeenByAnotherBus(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	a := recBus(t, clock, tr, store, log, every200(bus.MissedOnce))
	b := recBus(t, clock, tr, store, log, every200(bus.MissedOnce))
	walk(t, clock, log, 4, 25*time.Millisecond, recT0.Add(500*time.Millisecond), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	if err := a.PauseRecurring(ctxT(t), "tick"); err != nil {
		t.Fatal(err)
	}
	pausedAt := clock.Now()
	if infos, err := b.Recurrings(ctxT(t)); err != nil || len(infos) != 1 || !infos[0].Paused || !infos[0].Next.IsZero() {
		t.Fatalf("b.Recurrings after a paused it = %+v, %v; want it paused, with no next tick", infos, err)
	}
	advance(t, clock, 4, 25*time.Millisecond, clock.Now().Add(time.Second))
	time.Sleep(50 * time.Millisecond)
	// A tick a look-ahead dispatcher already holds is being delivered, as
	// with CancelScheduled: the first tick after the pause may go out.
	paused := log.len()
	ticks, _ := log.snapshot()
	if last := ticks[len(ticks)-1]; last.After(pausedAt.Add(250 * time.Millisecond)) {
		t.Fatalf("paused at %v, yet tick %v was sent: %v", pausedAt, last, ticks)
	}
	// A trigger sends one occurrence, paused or not, its tick the trigger's time.
	triggeredAt := clock.Now()
	if err := b.TriggerRecurring(ctxT(t), "tick"); err != nil {
		t.Fatal(err)
	}
	log.waitLen(t, paused+1)
	if ticks, _ := log.snapshot(); !ticks[paused].Equal(triggeredAt) {
		t.Fatalf("triggered occurrence has tick %v, want the trigger's time %v", ticks[paused], triggeredAt)
	}
	// b resumes what a paused: from the next tick, none of the paused ones.
	if err := b.ResumeRecurring(ctxT(t), "tick"); err != nil {
		t.Fatal(err)
	}
	from := clock.Now()
	walk(t, clock, log, 4, 25*time.Millisecond, from.Add(time.Second), func(now time.Time) int {
		return paused + 1 + len(ticksIn(200*time.Millisecond, from, now))
	})
	if m := a.Metrics().Recurring + b.Metrics().Recurring; m < uint64(log.len()) {
		t.Errorf("Metrics().Recurring sums to %d, want at least the %d occurrences handled", m, log.len())
	}
}

func TestRecurringUnknownNamesAreRefused(t *testing.T) {
	t.Parallel()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", SendOnly: true}, nil)
	for name, err := range map[string]error{
		"pause":   b.PauseRecurring(ctxT(t), "nope"),
		"resume":  b.ResumeRecurring(ctxT(t), "nope"),
		"trigger": b.TriggerRecurring(ctxT(t), "nope"),
		"delete":  b.DeleteRecurring(ctxT(t), "nope"),
	} {
		if !errors.Is(err, bus.ErrUnknownRecurring) {
			t.Errorf("%s of an unknown name = %v, want ErrUnknownRecurring", name, err)
		}
	}
}

func TestAddRecurringRefusesBadDeclarations(t *testing.T) {
	t.Parallel()
	msg := func(time.Time) any { return Tick{} }
	ok := bus.Recurring{Name: "ok", Schedule: bus.Every(time.Minute), Message: msg, Options: []bus.Option{bus.To("x")}}
	with := func(f func(r *bus.Recurring)) bus.Recurring { r := ok; f(&r); return r }
	cases := map[string]struct {
		r     bus.Recurring
		field string
	}{
		"empty name":        {with(func(r *bus.Recurring) { r.Name = "" }), "Name"},
		"bad character":     {with(func(r *bus.Recurring) { r.Name = "a/b" }), "Name"},
		"name too long":     {with(func(r *bus.Recurring) { r.Name = strings.Repeat("a", 101) }), "Name"},
		"nil schedule":      {with(func(r *bus.Recurring) { r.Schedule = nil }), "Schedule"},
		"every zero":        {with(func(r *bus.Recurring) { r.Schedule = bus.Every(0) }), "Schedule"},
		"sub-millisecond":   {with(func(r *bus.Recurring) { r.Schedule = bus.Every(time.Microsecond) }), "Schedule"},
		"nil message":       {with(func(r *bus.Recurring) { r.Message = nil }), "Message"},
		"DeliverAfter":      {with(func(r *bus.Recurring) { r.Options = []bus.Option{bus.DeliverAfter(time.Second)} }), "Options"},
		"DeliverAt":         {with(func(r *bus.Recurring) { r.Options = []bus.Option{bus.DeliverAt(time.Now())} }), "Options"},
		"WithMessageID":     {with(func(r *bus.Recurring) { r.Options = []bus.Option{bus.WithMessageID("m")} }), "Options"},
		"bad option":        {with(func(r *bus.Recurring) { r.Options = []bus.Option{bus.WithHeader("", "v")} }), "Options"},
		"unknown policy":    {with(func(r *bus.Recurring) { r.Missed = 9 }), "Missed"},
		"reserved header":   {with(func(r *bus.Recurring) { r.Options = []bus.Option{bus.WithHeader("postbus.x", "v")} }), "Options"},
		"name at 100 bytes": {with(func(r *bus.Recurring) { r.Name = strings.Repeat("a", 100) }), ""},
	}
	for name, c := range cases {
		b, err := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		err = b.AddRecurring(c.r)
		var re *bus.RecurringError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: AddRecurring = %v, want nil", name, err)
		case c.field != "" && (!errors.As(err, &re) || re.Field != c.field || !errors.Is(err, bus.ErrInvalidRecurring)):
			t.Errorf("%s: AddRecurring = %v, want a *RecurringError on %s", name, err, c.field)
		}
	}
	b, _ := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	if err := b.AddRecurring(ok); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRecurring(ok); !errors.Is(err, bus.ErrInvalidRecurring) {
		t.Errorf("the same name twice = %v, want ErrInvalidRecurring", err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(ctxT(t))
	if err := b.AddRecurring(with(func(r *bus.Recurring) { r.Name = "late" })); !errors.Is(err, bus.ErrAlreadyStarted) {
		t.Errorf("AddRecurring after Start = %v, want ErrAlreadyStarted", err)
	}
	np, _ := bus.New(bus.Config{Endpoint: "sales", Logger: quiet(), Persistence: noRecurring{}})
	if err := np.AddRecurring(ok); !errors.Is(err, bus.ErrRecurringNotSupported) {
		t.Errorf("AddRecurring on a persistence without RecurringStore = %v, want ErrRecurringNotSupported", err)
	}
}

type noRecurring struct{}

func (noRecurring) Durable() bool { return false }

// Two processes that declare one name differently (a rolling deploy): the
// one that started last wins, and the schedule follows its definition
// alone, without flapping back.
func TestRecurringRollingDeployTheLatestDeclarationWins(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	old := every200(bus.MissedOnce)
	recBus(t, clock, tr, store, log, old)
	walk(t, clock, log, 2, 25*time.Millisecond, recT0.Add(450*time.Millisecond), func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) })
	before := log.len() // 200, 400
	deployed := clock.Now()
	newer := old
	newer.Schedule = bus.Every(300 * time.Millisecond)
	nb := recBus(t, clock, tr, store, log, newer)
	walk(t, clock, log, 4, 25*time.Millisecond, deployed.Add(2*time.Second), func(now time.Time) int {
		return before + len(ticksIn(300*time.Millisecond, deployed, now))
	})
	ticks, _ := log.snapshot()
	if want := ticksIn(300*time.Millisecond, deployed, clock.Now()); !slices.EqualFunc(ticks[before:], want, time.Time.Equal) {
		t.Fatalf("after the deploy: %v, want the new schedule's ticks alone: %v", ticks[before:], want)
	}
	infos, err := nb.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || infos[0].Generation != 2 || infos[0].Schedule != "every 300ms" {
		t.Fatalf("Recurrings = %+v, %v; want generation 2 with the new schedule", infos, err)
	}
}

// A schedule no process declares any more is listed, and deleted with its
// stored occurrences.
func TestRecurringOrphanIsListedAndDeleted(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	a := recBus(t, clock, tr, store, log, every200(bus.MissedOnce))
	if err := a.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// An operator's bus that does not dispatch, as a command-line tool would.
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store, Clock: clock, SendOnly: true}, nil)
	infos, err := ops.Recurrings(ctxT(t))
	if err != nil || len(infos) != 1 || infos[0].Declared || infos[0].Name != "tick" || infos[0].Schedule != "every 200ms" ||
		!infos[0].Next.Equal(recT0.Truncate(200*time.Millisecond).Add(200*time.Millisecond)) {
		t.Fatalf("Recurrings = %+v, %v; want tick, not declared here, next at the first tick", infos, err)
	}
	if err := ops.DeleteRecurring(ctxT(t), "tick"); err != nil {
		t.Fatal(err)
	}
	if infos, err := ops.Recurrings(ctxT(t)); err != nil || len(infos) != 0 || store.Len() != 0 {
		t.Fatalf("after DeleteRecurring: %+v, %v, %d rows; want nothing left", infos, err, store.Len())
	}
}

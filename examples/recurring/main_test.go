package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"heartbeat: on a whole second: true", `report triggered by schedule "nightly-report"`,
		"heartbeat: every 1s, next within a day: true", "nightly-report: *cron.SpecSchedule, next within a day: true",
		"invoices triggered for tenant acme", "invoices-acme: CRON_TZ=Europe/Berlin 0 9 * * 1-5, made at runtime: true",
		"invoices-globex: CRON_TZ=Europe/Berlin 0 9 * * 1-5, made at runtime: true", "after globex left: 1 tenant schedule(s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// deliveries runs a bus declaring sched on a fake clock from from to to,
// in steps of ten minutes, and returns the ticks delivered.
func deliveries(t *testing.T, sched bus.Schedule, from, to time.Time) []time.Time {
	t.Helper()
	clock := bustest.NewFakeClock(from)
	var mu sync.Mutex
	var ticks []time.Time
	var early []string
	b, err := bus.New(bus.Config{Endpoint: "reports", Clock: clock, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, m BuildReport) error {
		mu.Lock()
		defer mu.Unlock()
		ticks = append(ticks, m.Day)
		if now := clock.Now(); now.Before(m.Day) {
			early = append(early, m.Day.String())
		}
		return nil
	})
	if err := b.AddRecurring(bus.Recurring{Name: "nightly-report", Schedule: sched,
		Message: func(tick time.Time) any { return BuildReport{Day: tick} }, Options: []bus.Option{bus.To("reports")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	// The ticks the schedule yields in the window: the bus must deliver
	// each once.
	var want []time.Time
	for tick := sched.Next(from); !tick.After(to); tick = sched.Next(tick) {
		want = append(want, tick)
	}
	for clock.Now().Before(to) {
		if !clock.WaitForTimers(ctx, 2) { // the dispatcher and the recurring loop sleep
			t.Fatal("the bus never went to sleep")
		}
		clock.Advance(10 * time.Minute)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(ticks)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("delivered early: %v", early)
	}
	// The clock runs ahead of the handlers: sort what arrived by tick.
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	if len(ticks) != len(want) {
		t.Fatalf("delivered %v, want each tick of the schedule once: %v", ticks, want)
	}
	for i := range want {
		if !ticks[i].Equal(want[i]) {
			t.Fatalf("delivered %v, want %v", ticks, want)
		}
	}
	return ticks
}

var berlin = mustLoad("Europe/Berlin")

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// The two DST changes of 2026 in Berlin: clocks go forward on 29 March
// (02:00 → 03:00) and back on 25 October (03:00 → 02:00).
var dstWindows = []struct {
	name     string
	from, to time.Time
}{
	{"spring", time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)},
	{"autumn", time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)},
}

// localDays counts the deliveries per local date in Berlin.
func localDays(ticks []time.Time) map[string]int {
	days := map[string]int{}
	for _, tick := range ticks {
		days[tick.In(berlin).Format("2006-01-02")]++
	}
	return days
}

// A Daily schedule at 02:30 Berlin time fires once every day across both
// changes: at 03:30 CEST on the day 02:30 does not exist.
func TestDailyFiresOncePerDayAcrossDST(t *testing.T) {
	for _, w := range dstWindows {
		t.Run(w.name, func(t *testing.T) {
			ticks := deliveries(t, Daily{Hour: 2, Minute: 30, Location: berlin}, w.from, w.to)
			days := localDays(ticks)
			if len(ticks) != 5 || len(days) != 5 {
				t.Fatalf("delivered %v, want one report on each of the 5 nights", ticks)
			}
			for _, tick := range ticks {
				if hm := tick.In(berlin).Format("15:04"); hm != "02:30" && hm != "03:30" {
					t.Errorf("report at %s Berlin time", hm)
				}
			}
		})
	}
}

// robfig/cron's "CRON_TZ=Europe/Berlin 30 2 * * *" yields no tick on the
// night 02:30 does not exist, and two on the night it happens twice; the
// bus delivers exactly the ticks the schedule yields (deliveries checks
// each once, none early), so a job that must run once a night inside the
// DST window wants a schedule like Daily, or a time outside 02:00–03:00.
func TestCronTicksAcrossDST(t *testing.T) {
	sched, err := cron.ParseStandard("CRON_TZ=Europe/Berlin 30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	spring := localDays(deliveries(t, sched, dstWindows[0].from, dstWindows[0].to))
	if spring["2026-03-29"] != 0 || len(spring) != 4 {
		t.Errorf("spring: reports per night %v; robfig/cron skips the night of 29 March", spring)
	}
	autumn := localDays(deliveries(t, sched, dstWindows[1].from, dstWindows[1].to))
	if autumn["2026-10-25"] != 2 || len(autumn) != 5 {
		t.Errorf("autumn: reports per night %v; robfig/cron fires twice on 25 October", autumn)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

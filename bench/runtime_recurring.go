package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/postbus/bus"
)

// The runtime-recurring workload measures schedules made at runtime
// (Bus.SetRecurring) in four phases, in this order:
//
//   - baseline: delayed messages at the rate the schedules tick (-n a
//     -tick-every), each DeliverAfter(3s), for a minute or -tick-for when
//     shorter: the run's database sessions' CPU per message, lateness;
//   - idle: hourly schedules made, then left, first about 1% of -n (at
//     most 1,000), then -n: the statements and CPU per second over -idle
//     with each count, from when a dispatcher has stepped them all;
//   - list: 50 ListRecurrings calls for a page of 100 in the middle of
//     the -n idle schedules;
//   - ticks: -n schedules of "@every <-tick-every>" with a Jitter of the
//     whole interval, made from a send-only bus, then measured ticking
//     for -tick-for (whole intervals): every tick of the window once
//     (received by the window's end plus -timeout), none early, their
//     lateness; the ticks whose handling started in the window per
//     second, and the sessions' CPU in the window per such tick and its
//     ratio to the baseline's per message.
//
// The idle schedules start two days after the run (Policy.Start), so
// none of their ticks falls in any phase, whatever the time of day; they
// stay while the ticks are measured, as other tenants' schedules would.

const (
	// runtimeTickPrefix and runtimeIdlePrefix name the schedules that
	// tick and those left idle: rt-tick-0000042.
	runtimeTickPrefix = "rt-tick-"
	runtimeIdlePrefix = "rt-idle-"
	// runtimeTickBits are the low bits of a tick's sequence number, which
	// hold its time (Unix milliseconds, good until 2039); the schedule's
	// number is above them.
	runtimeTickBits = 41
	// runtimeMaxSchedules bounds -n: the schedule numbers the sequence
	// numbers hold.
	runtimeMaxSchedules = 1 << (63 - runtimeTickBits)
	// runtimeDelayedAfter is the baseline messages' DeliverAfter.
	runtimeDelayedAfter = 3 * time.Second
	// runtimeBaselineSpan bounds how long the baseline sends.
	runtimeBaselineSpan = time.Minute
	// runtimeCreators are the goroutines that make schedules, unless
	// -senders is given.
	runtimeCreators = 8
	// runtimeIdleStart is how far ahead the idle schedules start.
	runtimeIdleStart = 48 * time.Hour
	// runtimeListCalls and runtimeListPage shape the list phase.
	runtimeListCalls = 50
	runtimeListPage  = 100
)

// RuntimeIdle is the idle cost with a number of runtime schedules stored
// and none due.
type RuntimeIdle struct {
	Schedules int `json:"schedules"`
	// SelfCPUPct is this process's (and its workers') CPU, percent of
	// one core.
	SelfCPUPct float64 `json:"self_cpu_percent"`
	// SessionCPUPct is the run's own database sessions' CPU, percent of
	// one core (PostgreSQL).
	SessionCPUPct *float64 `json:"session_cpu_percent,omitempty"`
	// ServerCPUPct is every local server process's CPU, other clients'
	// work included.
	ServerCPUPct *float64 `json:"server_cpu_percent,omitempty"`
	// QueriesPS is the scans of the run's tables per second: one or more
	// per statement that reads them.
	QueriesPS *float64 `json:"queries_per_s,omitempty"`
}

func tickName(i int) string { return fmt.Sprintf("%s%07d", runtimeTickPrefix, i) }
func idleName(i int) string { return fmt.Sprintf("%s%07d", runtimeIdlePrefix, i) }

// runtimeSeq is the sequence number of a receipt in the runtime-recurring
// workload: for the occurrence of schedule rt-tick-<i> (whose message is
// Tick{Seq: i}) for a tick, i<<runtimeTickBits | the tick's Unix
// milliseconds, one number per (schedule, tick); for a message of no
// schedule (the baseline's), its Seq; -1, which every tracker counts as
// unexpected, for an occurrence of an idle schedule or one whose name,
// message and tick do not agree.
func runtimeSeq(m Tick, in *bus.Envelope) int64 {
	name := in.Header(bus.HeaderRecurringName)
	if name == "" {
		return m.Seq
	}
	num, ok := strings.CutPrefix(name, runtimeTickPrefix)
	i, err := strconv.ParseInt(num, 10, 64)
	tick, terr := time.Parse(time.RFC3339Nano, in.Header(bus.HeaderRecurringTick))
	msec := tick.UnixMilli()
	if !ok || err != nil || terr != nil || i != m.Seq || i < 0 || i >= runtimeMaxSchedules || msec < 0 || msec >= 1<<runtimeTickBits {
		return -1
	}
	return i<<runtimeTickBits | msec
}

// runRuntimeRecurring runs the four phases (see the top of this file).
func runRuntimeRecurring(ctx context.Context, s *stage, r *Result) error {
	r.Schedules = s.o.n
	r.TickEvery = s.o.tickEvery.String()
	r.BodyBytes = s.bodyBytes(int64(s.o.n / 2))
	_, stop, err := s.receivers(ctx, r)
	if err != nil {
		return err
	}
	defer stop()
	ctl, err := s.newBus(true, 0, nil)
	if err != nil {
		return err
	}
	if err := ctl.Start(ctx); err != nil {
		return err
	}
	defer ctl.Stop(context.WithoutCancel(ctx))
	r.Senders = s.creators()
	if err := s.runtimeBaseline(ctx, ctl, r); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	if err := s.runtimeIdle(ctx, ctl, r); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := s.runtimeList(ctx, ctl, r); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if err := s.runtimeTicks(ctx, ctl, r); err != nil {
		return fmt.Errorf("ticks: %w", err)
	}
	return nil
}

// creators is how many goroutines send or make schedules.
func (s *stage) creators() int {
	if s.o.sendersGiven {
		return s.o.senders
	}
	return runtimeCreators
}

// runtimeBaseline sends delayed messages at the rate the schedules will
// tick and measures what each costs the database and how late it is.
func (s *stage) runtimeBaseline(ctx context.Context, b *bus.Bus, r *Result) error {
	rate := float64(s.o.n) / s.o.tickEvery.Seconds()
	span := min(runtimeBaselineSpan, s.o.tickFor)
	n := max(int(rate*span.Seconds()), 1)
	tr := newTracker(0, n)
	s.current.Store(tr)
	defer s.current.Store(nil)
	sess0, err := s.sessionSnapshot(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	after := bus.DeliverAfter(runtimeDelayedAfter)
	if _, err := s.eachPaced(ctx, n, rate, func(ctx context.Context, i int) error {
		return b.Send(ctx, Tick{Seq: int64(i), Pad: s.pad}, after)
	}); err != nil {
		return err
	}
	if err := await(ctx, tr, start.Add(span+runtimeDelayedAfter+s.o.timeout)); err != nil {
		return err
	}
	sess1, err := s.sessionSnapshot(ctx)
	if err != nil {
		return err
	}
	time.Sleep(duplicateGrace)
	t := tr.tally()
	r.applyPhaseTally("baseline", t)
	r.BaselineMessages = n
	r.BaselineLateness = percentiles(t.Lateness)
	if sess0 != nil && t.Received > 0 {
		r.BaselineSessionCPUPerMsgUS = ptr(round(float64(sess1.since(sess0))/float64(time.Microsecond)/float64(t.Received), 1))
	}
	return nil
}

// runtimeIdle makes hourly schedules that start in two days and measures
// the idle cost with about 1% of -n (at most 1,000) and then -n of them.
func (s *stage) runtimeIdle(ctx context.Context, b *bus.Bus, r *Result) error {
	tr := newTracker(0, 0) // nothing is due: any receipt is unexpected
	s.current.Store(tr)
	defer s.current.Store(nil)
	start := time.Now().Add(runtimeIdleStart)
	made := 0
	for _, count := range []int{min(1000, max(s.o.n/100, 1)), s.o.n} {
		if count <= made {
			continue
		}
		if _, err := s.setAll(ctx, b, made, count, func(i int) bus.RecurringSpec {
			return bus.RecurringSpec{Name: idleName(i), Schedule: "@every 1h", Message: Tick{Seq: -1},
				Options: []bus.Option{bus.To(s.endpoint)}, Policy: bus.RecurringPolicy{Start: start}}
		}); err != nil {
			return err
		}
		made = count
		if _, err := s.awaitStepped(ctx, runtimeIdlePrefix, count); err != nil {
			return err
		}
		sess0, err := s.sessionSnapshot(ctx)
		if err != nil {
			return err
		}
		began := time.Now()
		idle, err := s.idle(ctx)
		if err != nil {
			return err
		}
		sess1, err := s.sessionSnapshot(ctx)
		if err != nil {
			return err
		}
		fig := RuntimeIdle{Schedules: count, SelfCPUPct: idle.selfPct, ServerCPUPct: idle.serverPct, QueriesPS: idle.queriesPS}
		if sess0 != nil {
			fig.SessionCPUPct = ptr(round(100*float64(sess1.since(sess0))/float64(time.Since(began)), 3))
		}
		r.RuntimeIdle = append(r.RuntimeIdle, fig)
	}
	time.Sleep(duplicateGrace)
	r.applyPhaseTally("idle", tr.tally())
	return nil
}

// runtimeList times ListRecurrings for a page in the middle of the idle
// schedules.
func (s *stage) runtimeList(ctx context.Context, b *bus.Bus, r *Result) error {
	total := s.o.n
	from := total / 2
	want := min(runtimeListPage, total-from-1)
	took := make([]time.Duration, 0, runtimeListCalls)
	for range runtimeListCalls {
		began := time.Now()
		page, err := b.ListRecurrings(ctx, bus.RecurringFilter{Prefix: runtimeIdlePrefix, After: idleName(from), Limit: runtimeListPage})
		took = append(took, time.Since(began))
		if err != nil {
			return err
		}
		if len(page) != want || want > 0 && (page[0].Name != idleName(from+1) || page[want-1].Name != idleName(from+want)) {
			return fmt.Errorf("a page of %d schedules after %s, want %d from %s", len(page), idleName(from), want, idleName(from+1))
		}
	}
	r.ListLatency = percentiles(took)
	return nil
}

// runtimeTicks makes -n jittered schedules and measures them ticking over
// whole intervals: the window starts at the first multiple of -tick-every
// (since the Unix epoch) a second after a dispatcher first stepped them
// all, so each schedule has exactly one tick in each interval of the
// window.
func (s *stage) runtimeTicks(ctx context.Context, b *bus.Bus, r *Result) error {
	every, n := s.o.tickEvery, s.o.n
	tr := newKeyedTracker()
	s.current.Store(tr)
	defer s.current.Store(nil)
	took, err := s.setAll(ctx, b, 0, n, func(i int) bus.RecurringSpec {
		return bus.RecurringSpec{Name: tickName(i), Schedule: "@every " + every.String(), Message: Tick{Seq: int64(i), Pad: s.pad},
			Options: []bus.Option{bus.To(s.endpoint)}, Policy: bus.RecurringPolicy{Jitter: every}}
	})
	if err != nil {
		return err
	}
	r.CreateMS = ms(took)
	r.CreatePerSec = round(float64(n)/max(took.Seconds(), 1e-9), 0)
	stepped, err := s.awaitStepped(ctx, runtimeTickPrefix, n)
	if err != nil {
		return err
	}
	r.FirstStepsMS = ms(stepped)
	periods := max(int(math.Round(float64(s.o.tickFor)/float64(every))), 1)
	w0 := time.Unix(0, (time.Now().Add(time.Second).UnixNano()/int64(every)+1)*int64(every))
	w1 := w0.Add(time.Duration(periods) * every)
	sleepCtx(ctx, time.Until(w0))
	st0, err := s.storeWrites(ctx)
	if err != nil {
		return err
	}
	sess0, err := s.sessionSnapshot(ctx)
	if err != nil {
		return err
	}
	sleepCtx(ctx, time.Until(w1))
	sess1, err := s.sessionSnapshot(ctx)
	if err != nil {
		return err
	}
	st1, err := s.storeWrites(ctx)
	if err != nil {
		return err
	}
	want := n * periods
	win := windowOf(tr, w0, w1, n, periods)
	for deadline := w1.Add(s.o.timeout); win.received < want && time.Now().Before(deadline) && ctx.Err() == nil; {
		sleepCtx(ctx, 250*time.Millisecond)
		win = windowOf(tr, w0, w1, n, periods)
	}
	time.Sleep(duplicateGrace)
	win = windowOf(tr, w0, w1, n, periods)
	t := tr.tally()
	t.Missing = want - win.received
	if win.extra > 0 {
		t.Unexpected += win.extra
		t.Strays = append(t.Strays, fmt.Sprintf("%d ticks beyond one a schedule per interval", win.extra))
	}
	r.applyPhaseTally("ticks", t)
	r.DurationMS = ms(w1.Sub(w0))
	r.MsgsPerSec = round(float64(win.handled)/w1.Sub(w0).Seconds(), 0)
	r.TicksDuePerSec = round(float64(want)/w1.Sub(w0).Seconds(), 0)
	r.Lateness = percentiles(win.lateness)
	if sess0 != nil && win.handled > 0 {
		cpu := sess1.since(sess0)
		r.SessionCPUMS = ptr(round(float64(cpu)/float64(time.Millisecond), 0))
		r.SessionCPUPerTickUS = ptr(round(float64(cpu)/float64(time.Microsecond)/float64(win.handled), 1))
		if base := r.BaselineSessionCPUPerMsgUS; base != nil && *base > 0 {
			r.TickCPURatio = ptr(round(*r.SessionCPUPerTickUS / *base, 2))
		}
	}
	if st0 != nil && st1 != nil && win.handled > 0 {
		r.WritesPerTick = ptr(round(float64(st1.writes-st0.writes)/float64(win.handled), 2))
		r.ScansPerTick = ptr(round(float64(st1.scans-st0.scans)/float64(win.handled), 2))
	}
	return nil
}

// awaitStepped waits until a dispatcher has stepped each of the count
// schedules named prefix…: SetRecurring only stores a schedule, and a
// dispatcher stores its first occurrences (the record's Ticks) when it
// claims it, which for many schedules made at once takes a while
// that must not fall in a measured window. It returns how long it
// waited; on a store that cannot page its records, nothing.
func (s *stage) awaitStepped(ctx context.Context, prefix string, count int) (time.Duration, error) {
	st, ok := s.persistence.(bus.RecurringRuntimeStore)
	if !ok {
		return 0, nil
	}
	start := time.Now()
	deadline := start.Add(s.o.timeout + time.Duration(count)*5*time.Millisecond)
	for {
		stepped, after := 0, ""
		for {
			page, err := st.ListRecurringPage(ctx, prefix, after, 1000)
			if err != nil {
				return 0, fmt.Errorf("list the schedules: %w", err)
			}
			for _, rec := range page {
				if len(rec.Ticks) > 0 {
					stepped++
				}
			}
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].Name
		}
		switch {
		case stepped >= count:
			return time.Since(start), nil
		case time.Now().After(deadline):
			return 0, fmt.Errorf("%d of %d schedules %s… stepped after %v", stepped, count, prefix, time.Since(start).Round(time.Second))
		}
		sleepCtx(ctx, 500*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// tickWindow is what a keyed tracker received of the ticks in a window.
type tickWindow struct {
	received int // distinct (schedule, tick) pairs of the window's ticks
	extra    int // more ticks of one schedule than the window holds
	lateness []time.Duration
	// handled counts the ticks, of the window or not, whose handling
	// started in the window: the work the window's CPU paid for, which is
	// not the window's ticks when the store falls behind.
	handled int
}

// windowOf counts the ticks of schedules 0..n-1 in [w0, w1) that tr
// received; each schedule has periods ticks there.
func windowOf(tr *tracker, w0, w1 time.Time, n, periods int) tickWindow {
	lo, hi := w0.UnixMilli(), w1.UnixMilli()
	perSchedule := make(map[int64]int)
	var w tickWindow
	tr.each(func(seq int64, late time.Duration) {
		i, msec := seq>>runtimeTickBits, seq&(1<<runtimeTickBits-1)
		if i >= int64(n) {
			return
		}
		if at := msec + late.Milliseconds(); at >= lo && at < hi {
			w.handled++
		}
		if msec < lo || msec >= hi {
			return
		}
		perSchedule[i]++
		if perSchedule[i] > periods {
			w.extra++
			return
		}
		w.received++
		w.lateness = append(w.lateness, late)
	})
	return w
}

// setAll makes the schedules from..to-1 with SetRecurring from the
// stage's creators, and returns how long it took.
func (s *stage) setAll(ctx context.Context, b *bus.Bus, from, to int, spec func(i int) bus.RecurringSpec) (time.Duration, error) {
	return s.eachPaced(ctx, to-from, 0, func(ctx context.Context, i int) error {
		if err := b.SetRecurring(ctx, spec(from+i)); err != nil {
			return fmt.Errorf("set %s: %w", spec(from+i).Name, err)
		}
		return nil
	})
}

// eachPaced calls f for 0..n-1 from the stage's creators, call i not
// before start + i/rate when rate is positive, and returns how long it
// took; the first error stops them all.
func (s *stage) eachPaced(ctx context.Context, n int, rate float64, f func(ctx context.Context, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := min(s.creators(), max(n, 1))
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n && ctx.Err() == nil; i += workers {
				if rate > 0 {
					sleepCtx(ctx, time.Until(start.Add(time.Duration(float64(i)/rate*float64(time.Second)))))
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return took, err
	}
	return took, nil
}

// applyPhaseTally applies a phase's tally to r, and notes the phase's
// unexpected receipts, if any, for whoever looks into them.
func (r *Result) applyPhaseTally(phase string, t tally) {
	r.applyTally(t)
	if t.Unexpected > 0 {
		note := fmt.Sprintf("%s: %d unexpected (%s)", phase, t.Unexpected, strings.Join(t.Strays, "; "))
		r.Note = strings.TrimPrefix(r.Note+"; "+note, "; ")
	}
}

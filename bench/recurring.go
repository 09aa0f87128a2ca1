package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
)

// recurringSlots bounds the ticks of one schedule the recurring workload's
// tracker numbers: Tick.Seq is schedule*recurringSlots + seconds since t0.
const recurringSlots = 10_000

// runRecurring measures recurring schedules on the store: -n schedules of
// Every(1s) ticking for -tick-for (row writes, store scans and the run's
// database sessions' CPU per tick, lateness), then the idle cost of
// -idle-schedules schedules of Every(1h) declared with nothing due
// (statements and server CPU per second over -idle).
func runRecurring(ctx context.Context, s *stage, r *Result) error {
	r.Schedules = s.o.n
	t0 := time.Now().Truncate(time.Second)
	tr := newTracker(0, s.o.n*recurringSlots)
	s.current.Store(tr)
	defer s.current.Store(nil)
	b, err := s.recurringBus(ctx, s.o.n, time.Second, func(i int, tick time.Time) int64 {
		return int64(i)*recurringSlots + min(int64(tick.Sub(t0)/time.Second), recurringSlots-1)
	})
	if err != nil {
		return err
	}
	w0, err := s.storeWrites(ctx)
	if err != nil {
		_ = b.Stop(context.WithoutCancel(ctx))
		return err
	}
	sess0, err := s.sessionSnapshot(ctx)
	if err != nil {
		_ = b.Stop(context.WithoutCancel(ctx))
		return err
	}
	before := tr.tally().Received
	sleepCtx(ctx, s.o.tickFor)
	sess1, err := s.sessionSnapshot(ctx)
	if err != nil {
		_ = b.Stop(context.WithoutCancel(ctx))
		return err
	}
	w1, err := s.storeWrites(ctx)
	if err := stopBus(ctx, b, err); err != nil {
		return err
	}
	t := tr.tally()
	ticks := t.Received - before
	r.Lateness = percentiles(t.Lateness)
	r.MsgsPerSec = round(float64(ticks)/s.o.tickFor.Seconds(), 0)
	if w0 != nil && w1 != nil && ticks > 0 {
		r.WritesPerTick = ptr(round(float64(w1.writes-w0.writes)/float64(ticks), 2))
		r.ScansPerTick = ptr(round(float64(w1.scans-w0.scans)/float64(ticks), 2))
	}
	if sess0 != nil && ticks > 0 {
		r.SessionCPUMS = ptr(round(float64(sess1.since(sess0))/float64(time.Millisecond), 0))
		r.SessionCPUPerTickUS = ptr(round(float64(sess1.since(sess0))/float64(time.Microsecond)/float64(ticks), 1))
	}

	// The idle cost: hourly schedules, nothing due while it is measured.
	r.IdleSchedules = s.o.idleSchedules
	idleBus, err := s.recurringBus(ctx, s.o.idleSchedules, time.Hour, func(int, time.Time) int64 { return -1 })
	if err != nil {
		return err
	}
	idle, err := s.idle(ctx)
	if err := stopBus(ctx, idleBus, err); err != nil {
		return err
	}
	// The occurrences the ticking bus stored ahead arrive during the idle
	// phase: they count against duplicates and early, not as unexpected.
	t = tr.tally()
	t.Missing = 0 // the tracker numbers more slots than the run has ticks
	r.applyTally(t)
	r.IdleCPUPercent = ptr(idle.selfPct)
	r.ServerIdleCPUPct = idle.serverPct
	r.ServerIdleQueriesPS = idle.queriesPS
	return nil
}

// stopBus stops b and returns err, or the Stop error when err is nil.
func stopBus(ctx context.Context, b *bus.Bus, err error) error {
	if serr := b.Stop(context.WithoutCancel(ctx)); err == nil && serr != nil {
		return fmt.Errorf("stop: %w", serr)
	}
	return err
}

// recurringBus starts a receiving bus that declares n schedules of every,
// whose occurrence of tick for schedule i carries Tick{Seq: seq(i, tick)}.
func (s *stage) recurringBus(ctx context.Context, n int, every time.Duration, seq func(i int, tick time.Time) int64) (*bus.Bus, error) {
	b, err := s.newBus(false, s.o.handlers, nil)
	if err != nil {
		return nil, err
	}
	for i := range n {
		err := b.AddRecurring(bus.Recurring{
			Name:     fmt.Sprintf("bench-%d", i),
			Schedule: bus.Every(every),
			Message:  func(tick time.Time) any { return Tick{Seq: seq(i, tick)} },
		})
		if err != nil {
			return nil, err
		}
	}
	if err := b.Start(ctx); err != nil {
		return nil, fmt.Errorf("start with %d schedules: %w", n, err)
	}
	return b, nil
}

// tableStats are the run's tables' row writes and scans so far.
type tableStats struct{ writes, scans int64 }

// storeWrites reads the run's tables' row writes (inserts, updates and
// deletes) and scans from pg_stat_user_tables; nil on other stores.
func (s *stage) storeWrites(ctx context.Context) (*tableStats, error) {
	if s.o.persistence != "postgres" {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, s.o.postgresURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	var st tableStats
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint,
			coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::bigint
		FROM pg_stat_user_tables WHERE schemaname = $1`, postgresSchema(s.o.run)).Scan(&st.writes, &st.scans)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	return &st, nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/postbus/bus"
)

// Sequence number ranges of the backlog workload: the spread without the
// backlog, the backlog itself, and the spread with it.
const (
	baselineSeq int64 = 0
	backlogSeq  int64 = 1 << 40
	withSeq     int64 = 1 << 41
)

// latenessTolerance is how far the p99 lateness with a backlog may exceed
// the p99 without it before the backlog counts as moving lateness.
const latenessTolerance = 5 * time.Millisecond

// runBacklog measures a spread and the idle cost without a backlog, then
// stores -backlog rows due an hour ahead and measures both again.
func runBacklog(ctx context.Context, s *stage, r *Result) error {
	n := s.o.n
	r.Senders = s.o.senders
	r.BodyBytes = s.bodyBytes(int64(n / 2))
	r.Backlog = s.o.backlog
	b, stop, err := s.receivers(ctx, r)
	if err != nil {
		return err
	}
	defer stop()

	idleBase, err := s.idle(ctx)
	if err != nil {
		return err
	}
	base, err := s.phase(ctx, b, baselineSeq, n, s.spreadDue(n))
	if err != nil {
		return err
	}
	hour := bus.DeliverAfter(time.Hour)
	at := func(int) bus.Option { return hour }
	var took time.Duration
	if s.o.backlogBatch > 0 {
		took, err = s.scheduleBatches(ctx, b, backlogSeq, s.o.backlog, s.o.backlogBatch, at)
	} else {
		took, err = s.scheduleAll(ctx, b, backlogSeq, s.o.backlog, at)
	}
	if err != nil {
		return err
	}
	r.BacklogMsgsPerSec = round(float64(s.o.backlog)/took.Seconds(), 0)
	idleWith, err := s.idle(ctx)
	if err != nil {
		return err
	}
	with, err := s.phase(ctx, b, withSeq, n, s.spreadDue(n))
	if err != nil {
		return err
	}

	with.fill(r)
	r.applyTally(base.tally)
	r.BaselineLateness = percentiles(base.tally.Lateness)
	if r.Lateness != nil && r.BaselineLateness != nil {
		r.LatenessMoved = ptr(r.Lateness.P99 > r.BaselineLateness.P99+ms(latenessTolerance))
	}
	r.IdleCPUBaseline = ptr(idleBase.selfPct)
	r.IdleCPUPercent = ptr(idleWith.selfPct)
	r.ServerIdleCPUPct = idleWith.serverPct
	r.ServerIdleQueriesPS = idleWith.queriesPS
	return nil
}

// idleCost is what a stage costs over -idle seconds with nothing due.
type idleCost struct {
	selfPct   float64  // this process and its workers, percent of one core
	serverPct *float64 // the local servers, percent of one core
	queriesPS *float64 // statements the store's server ran per second
}

// idle measures the CPU used while nothing is due: this process (and any
// worker processes) and, where known, the servers and their query count.
func (s *stage) idle(ctx context.Context) (idleCost, error) {
	// Settle what the previous phase left to the runtime (a GC cycle,
	// sweeping, returning freed pages to the OS): the figure is the steady
	// idle cost of the bus, not the one-off clean-up after scheduling.
	debug.FreeOSMemory()
	procs := append(append([]string(nil), s.pd.serverProcs...), s.td.serverProcs...)
	self0 := selfCPU() + s.workerCPU()
	srv0, err := s.idleServerSnapshot(ctx, procs)
	if err != nil {
		return idleCost{}, err
	}
	var q0 int64
	if s.pd.idleQueries != nil {
		if q0, err = s.pd.idleQueries(ctx, s.o); err != nil {
			return idleCost{}, err
		}
	}
	start := time.Now()
	select {
	case <-time.After(s.o.idle):
	case <-ctx.Done():
		return idleCost{}, ctx.Err()
	}
	wall := time.Since(start)
	self1 := selfCPU() + s.workerCPU()
	srv1, err := s.idleServerSnapshot(ctx, procs)
	if err != nil {
		return idleCost{}, err
	}
	c := idleCost{selfPct: round(100*float64(self1-self0)/float64(wall), 3)}
	if srv0 != nil {
		c.serverPct = ptr(round(100*float64(srv1.since(srv0))/float64(wall), 3))
	}
	if s.pd.idleQueries != nil {
		q1, err := s.pd.idleQueries(ctx, s.o)
		if err != nil {
			return idleCost{}, err
		}
		c.queriesPS = ptr(round(float64(q1-q0)/wall.Seconds(), 1))
	}
	return c, nil
}

// scheduleBatches stores n Ticks from base with SendBatch calls of size
// messages, one call after another, and returns how long that took.
func (s *stage) scheduleBatches(ctx context.Context, b *bus.Bus, base int64, n, size int, opt func(i int) bus.Option) (time.Duration, error) {
	start := time.Now()
	for from := 0; from < n; from += size {
		var batch bus.Batch
		for i := from; i < min(from+size, n); i++ {
			batch.Send(Tick{Seq: base + int64(i), Pad: s.pad}, opt(i))
		}
		if err := b.SendBatch(ctx, &batch); err != nil {
			return time.Since(start), fmt.Errorf("send batch at %d: %w", from, err)
		}
	}
	return time.Since(start), nil
}

// idleServerSnapshot samples the servers' CPU for the idle cost: the
// store's own nodes where it names them (Redis), else every process named
// procs.
func (s *stage) idleServerSnapshot(ctx context.Context, procs []string) (cpuSnapshot, error) {
	if s.pd.nodes {
		return s.sessionSnapshot(ctx)
	}
	return serverSnapshot(procs), nil
}

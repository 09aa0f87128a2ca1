package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// duplicateGrace is how long a run keeps listening after the last expected
// receipt, for duplicates.
const duplicateGrace = 250 * time.Millisecond

// statsDelay is how long a run waits before it reads the server's table
// statistics at the end of a phase: a busy backend publishes them about
// once a second, so the figure read is close, not exact.
const statsDelay = 1500 * time.Millisecond

// runSchedule measures how fast Send stores messages due in an hour, and
// for the memory store how much heap each one takes.
func runSchedule(ctx context.Context, s *stage, r *Result) error {
	b, err := s.newBus(false, s.o.handlers, nil)
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.WithoutCancel(ctx))
	r.Senders = s.o.senders
	r.BodyBytes = s.bodyBytes(int64(s.o.n / 2))
	measureHeap := s.o.persistence == "memory"
	var before runtime.MemStats
	if measureHeap {
		runtime.GC()
		runtime.ReadMemStats(&before)
	}
	after := bus.DeliverAfter(time.Hour)
	cpu0 := selfCPU()
	took, err := s.scheduleAll(ctx, b, 0, s.o.n, func(int) bus.Option { return after })
	if err != nil {
		return err
	}
	r.CPUPerMsgUS = cpuPerMsg(selfCPU()-cpu0, s.o.n)
	r.DurationMS = ms(took)
	r.MsgsPerSec = round(float64(s.o.n)/took.Seconds(), 0)
	if measureHeap && s.o.n > 0 {
		var now runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&now)
		per := (float64(now.HeapAlloc) - float64(before.HeapAlloc)) / float64(s.o.n)
		r.HeapBytesPerMsg = round(per, 1)
		r.HeapBeyondBody = round(per-float64(r.BodyBytes), 1)
		runtime.KeepAlive(s.persistence)
	}
	return nil
}

// runBurst schedules n messages due at one instant t0 and measures from t0
// until the last one was handled.
func runBurst(ctx context.Context, s *stage, r *Result) error {
	return s.delayed(ctx, r, func(t0 time.Time, _ int) time.Time { return t0 })
}

// runSpread schedules n messages due uniformly over -over and measures their
// lateness.
func runSpread(ctx context.Context, s *stage, r *Result) error {
	return s.delayed(ctx, r, s.spreadDue(s.o.n))
}

func (s *stage) spreadDue(n int) func(t0 time.Time, i int) time.Time {
	over := s.o.over
	return func(t0 time.Time, i int) time.Time {
		return t0.Add(time.Duration(int64(over) * int64(i) / int64(max(n, 1))))
	}
}

// delayed runs one burst or spread and fills in r.
func (s *stage) delayed(ctx context.Context, r *Result, due func(t0 time.Time, i int) time.Time) error {
	r.Senders = s.o.senders
	r.BodyBytes = s.bodyBytes(int64(s.o.n / 2))
	b, stop, err := s.receivers(ctx, r)
	if err != nil {
		return err
	}
	defer stop()
	p, err := s.phase(ctx, b, 0, s.o.n, due)
	if err != nil {
		return err
	}
	p.fill(r)
	return nil
}

// receivers starts the bus that schedules and, without -instances, also
// dispatches and handles; with -instances it is send-only and the worker
// processes dispatch and handle. stop ends them all.
func (s *stage) receivers(ctx context.Context, r *Result) (*bus.Bus, func(), error) {
	sendOnly := s.o.instances > 0
	b, err := s.newBus(sendOnly, s.o.handlers, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, nil, err
	}
	stopBus := func() { _ = b.Stop(context.WithoutCancel(ctx)) }
	if !sendOnly {
		return b, stopBus, nil
	}
	f, err := startWorkers(ctx, s)
	if err != nil {
		stopBus()
		return nil, nil, err
	}
	r.Instances = s.o.instances
	return b, func() { _ = f.stop(); stopBus() }, nil
}

// phaseResult is what one scheduled batch showed.
type phaseResult struct {
	t0        time.Time
	took      time.Duration // scheduling
	schedCPU  time.Duration // this process, while it scheduled
	tally     tally
	serverCPU *float64      // milliseconds, while the batch fell due
	cpu       time.Duration // this process and its workers, while the batch fell due
	scans     *int64        // index and table scans of the run's tables, where known
	sessions  *float64      // milliseconds of the run's own database sessions, where known
	nodes     []float64     // milliseconds of each server node, where the store names them
	logBytes  *int64        // the server's WAL or redo log written, where known
	runLog    *runLog       // of which the run's own, where known
	note      string        // what could not be measured, and why
}

// fill puts a phase's figures into r: duration from t0 (the first due time)
// to the last receipt, rates, lateness and counts.
func (p *phaseResult) fill(r *Result) {
	t := p.tally
	d := max(t.Last.Sub(p.t0), time.Microsecond)
	r.DurationMS = ms(d)
	r.MsgsPerSec = round(float64(t.Received)/d.Seconds(), 0)
	r.ScheduleMsgsPerSec = round(float64(r.N)/p.took.Seconds(), 0)
	r.Lateness = percentiles(t.Lateness)
	r.CPUPerMsgUS = cpuPerMsg(p.cpu, t.Received)
	r.ScheduleCPUPerMsgUS = cpuPerMsg(p.schedCPU, r.N)
	r.applyTally(t)
	if p.scans != nil && t.Received > 0 {
		r.StoreScansPer1k = ptr(round(float64(*p.scans)*1000/float64(t.Received), 0))
	}
	if p.sessions != nil {
		r.SessionCPUMS = ptr(round(*p.sessions, 0))
	}
	if len(p.nodes) > 0 && t.Received > 0 {
		for _, ms := range p.nodes {
			r.NodeCPUMSPer1k = append(r.NodeCPUMSPer1k, round(ms*1000/float64(t.Received), 1))
		}
	}
	if p.logBytes != nil && t.Received > 0 {
		r.LogBytesPerMsg = ptr(round(float64(*p.logBytes)/float64(t.Received), 0))
	}
	if p.runLog != nil && t.Received > 0 {
		r.RunLogBytesPerMsg = ptr(round(float64(p.runLog.bytes)/float64(t.Received), 0))
		r.RunLogFPIBytesPerMsg = ptr(round(float64(p.runLog.fpiBytes)/float64(t.Received), 0))
	}
	if p.note != "" {
		r.Note = strings.TrimPrefix(r.Note+"; "+p.note, "; ")
	}
	if p.serverCPU != nil {
		r.ServerCPUMS = ptr(round(*p.serverCPU, 0))
		if t.Received > 0 {
			r.ServerCPUMSPer1k = ptr(round(*p.serverCPU*1000/float64(t.Received), 1))
		}
	}
}

// sessionSnapshot samples the CPU of the server processes serving the
// run's own database sessions; nil when the store cannot name them.
func (s *stage) sessionSnapshot(ctx context.Context) (cpuSnapshot, error) {
	if s.pd.sessionPIDs == nil {
		return nil, nil
	}
	pids, err := s.pd.sessionPIDs(ctx, s.o)
	if err != nil {
		return nil, err
	}
	return pidSnapshot(pids), nil
}

// logPosition reads the server's log position in bytes; nil when the
// store cannot.
func (s *stage) logPosition(ctx context.Context) (*int64, error) {
	if s.pd.logPosition == nil {
		return nil, nil
	}
	pos, err := s.pd.logPosition(ctx, s.o)
	if err != nil {
		return nil, fmt.Errorf("read the server's log position: %w", err)
	}
	return &pos, nil
}

// phase schedules n Ticks numbered base.. due at due(t0, i), where t0 is the
// lead time ahead, waits for their receipts, and tallies them.
func (s *stage) phase(ctx context.Context, b *bus.Bus, base int64, n int, due func(t0 time.Time, i int) time.Time) (*phaseResult, error) {
	tr := newTracker(base, n)
	s.current.Store(tr)
	defer s.current.Store(nil)
	procs := append(append([]string(nil), s.pd.serverProcs...), s.td.serverProcs...)
	lead := s.leadFor(n)
	p := &phaseResult{t0: time.Now().Add(lead)}
	var err error
	sched0 := selfCPU()
	p.took, err = s.scheduleAll(ctx, b, base, n, func(i int) bus.Option { return bus.DeliverAt(due(p.t0, i)) })
	p.schedCPU = selfCPU() - sched0
	if err != nil {
		return nil, err
	}
	if err := checkLead(time.Now(), p.t0, p.took); err != nil {
		return nil, err
	}
	var scans0 int64
	if s.pd.idleQueries != nil {
		if scans0, err = s.pd.idleQueries(ctx, s.o); err != nil {
			return nil, err
		}
	}
	sessions0, err := s.sessionSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	log0, err := s.logPosition(ctx)
	if err != nil {
		return nil, err
	}
	cpu0 := serverSnapshot(procs)
	self0 := selfCPU() + s.workerCPU()
	last := due(p.t0, max(n-1, 0))
	if err := await(ctx, tr, last.Add(s.o.timeout)); err != nil {
		return nil, err
	}
	cpu1 := serverSnapshot(procs)
	p.cpu = selfCPU() + s.workerCPU() - self0
	sessions1, err := s.sessionSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	if sessions0 != nil {
		p.sessions = ptr(float64(sessions1.since(sessions0)) / 1e6)
		if s.pd.nodes {
			p.nodes = sessions1.perProcess(sessions0)
		}
	}
	// Keep listening a little longer (worker processes flush their receipts
	// every few milliseconds), so a duplicate right after the last message
	// still counts.
	time.Sleep(duplicateGrace)
	p.tally = tr.tally()
	// Read after the grace: the dispatcher deletes delivered rows every
	// 100 ms, so the last deletes are written by now.
	log1, err := s.logPosition(ctx)
	if err != nil {
		return nil, err
	}
	if log0 != nil && log1 != nil {
		p.logBytes = ptr(*log1 - *log0)
		if s.pd.runLogBytes != nil {
			// Not every server lets the run read its log: the figure is
			// then missing, and the run goes on.
			if own, err := s.pd.runLogBytes(ctx, s.o, *log0, *log1); err != nil {
				p.note = fmt.Sprintf("run's own log not read: %v", err)
			} else {
				p.runLog = &own
			}
		}
	}
	if cpu0 != nil {
		p.serverCPU = ptr(float64(cpu1.since(cpu0)) / 1e6)
	}
	if s.pd.idleQueries != nil {
		time.Sleep(statsDelay)
		scans1, err := s.pd.idleQueries(ctx, s.o)
		if err != nil {
			return nil, err
		}
		p.scans = ptr(scans1 - scans0)
	}
	return p, nil
}

package main

import (
	"context"
	"time"

	"github.com/postbus/bus"
)

// runScheduleBatch measures one SendBatch call that schedules n Ticks with
// DeliverAfter(-lead), then checks that every one is delivered once and
// none early. The rate is n over the call's duration (building the batch
// included); the server's CPU is what its processes used during the call.
func runScheduleBatch(ctx context.Context, s *stage, r *Result) error {
	b, stop, err := s.receivers(ctx, r)
	if err != nil {
		return err
	}
	defer stop()
	r.BodyBytes = s.bodyBytes(int64(s.o.n / 2))
	tr := newTracker(0, s.o.n)
	s.current.Store(tr)
	defer s.current.Store(nil)
	delay := s.batchDelay()
	after := bus.DeliverAfter(delay)
	procs := append(append([]string(nil), s.pd.serverProcs...), s.td.serverProcs...)

	server0, cpu0 := serverSnapshot(procs), selfCPU()
	start := time.Now()
	took, err := s.scheduleBatches(ctx, b, 0, s.o.n, s.o.n, func(int) bus.Option { return after })
	if err != nil {
		return err
	}
	r.CPUPerMsgUS = cpuPerMsg(selfCPU()-cpu0, s.o.n)
	if server0 != nil {
		server := float64(serverSnapshot(procs).since(server0)) / 1e6
		r.ServerCPUMS = ptr(round(server, 0))
		if s.o.n > 0 {
			r.ServerCPUMSPer1k = ptr(round(server*1000/float64(s.o.n), 1))
		}
	}
	r.DurationMS = ms(took)
	r.MsgsPerSec = round(float64(s.o.n)/took.Seconds(), 0)
	r.Note = "one SendBatch call"

	if err := await(ctx, tr, start.Add(max(delay, took)).Add(s.o.timeout)); err != nil {
		return err
	}
	time.Sleep(duplicateGrace)
	r.applyTally(tr.tally())
	return nil
}

// batchDelay is the delay of the schedule-batch messages: -lead, or 2 s and
// 10 µs a message, so that the delivery check follows the call closely.
// Messages due before the call ends are delivered late, never early: the
// batch is stored (committed) all at once.
func (s *stage) batchDelay() time.Duration {
	if s.o.lead > 0 {
		return s.o.lead
	}
	return 2*time.Second + time.Duration(s.o.n)*10*time.Microsecond
}

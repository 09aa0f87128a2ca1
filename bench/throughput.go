package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// runThroughput measures immediate Send→handler round trips: -concurrency
// concurrent handlers and as many senders (-senders if given), at most
// -inflight messages sent but not yet handled, -body byte bodies, paced to
// -rate messages a second in all when given. Send returns once the transport
// accepted the message (a broker's confirm), so the rate is what a sender
// gets with delivery guarantees on; latency is the handler's time minus the
// envelope's SentAt.
//
// On PostgreSQL each handling also does business work (see business): one
// INSERT and one Ticked event, received by a second endpoint; the run then
// waits for every event too and reports the commit→receipt times. -outbox
// runs that work in the transactional outbox.
func runThroughput(ctx context.Context, s *stage, r *Result) error {
	n := s.o.n
	senders := s.o.concurrency
	if s.o.sendersGiven {
		senders = s.o.senders
	}
	r.Senders = senders
	r.BodyBytes = s.bodyBytes(int64(n / 2))
	tr := newTracker(0, n)
	s.current.Store(tr)
	defer s.current.Store(nil)
	slots := make(chan struct{}, s.o.inflight)
	var events *tracker
	if s.o.persistence == "postgres" {
		w, err := newBusiness(ctx, s)
		if err != nil {
			return err
		}
		s.business, r.Outbox = w, s.o.outbox
		defer func() { s.business = nil }()
		events = newTracker(0, n)
		rb, err := s.startReceiver(ctx, events)
		if err != nil {
			return err
		}
		defer rb.Stop(context.WithoutCancel(ctx))
	}
	b, err := s.newBus(false, s.o.concurrency, func(int64, string, time.Time, time.Duration) {
		select {
		case <-slots:
		default: // a duplicate: it took no slot
		}
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.WithoutCancel(ctx))

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start, cpu0 := time.Now(), selfCPU()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for i := w; i < n; i += senders {
				if s.o.rate > 0 { // message i leaves at start + i/rate
					if d := time.Until(start.Add(time.Duration(float64(i) / s.o.rate * float64(time.Second)))); d > 0 {
						select {
						case <-time.After(d):
						case <-sctx.Done():
							return
						}
					}
				}
				select {
				case slots <- struct{}{}:
				case <-sctx.Done():
					return
				}
				if err := b.Send(sctx, Tick{Seq: int64(i), Pad: s.pad}); err != nil {
					cancel(fmt.Errorf("send %d: %w", i, err))
					return
				}
			}
		})
	}
	waitErr := await(sctx, tr, time.Now().Add(s.o.timeout+time.Duration(n)*time.Millisecond))
	cancel(nil)
	wg.Wait()
	if err := context.Cause(sctx); err != nil && err != context.Canceled {
		return err
	}
	if waitErr != nil && ctx.Err() != nil {
		return waitErr
	}
	cpu := selfCPU() - cpu0
	time.Sleep(duplicateGrace)
	t := tr.tally()
	r.CPUPerMsgUS = cpuPerMsg(cpu, t.Received)
	d := max(t.Last.Sub(start), time.Microsecond)
	r.DurationMS = ms(d)
	r.MsgsPerSec = round(float64(t.Received)/d.Seconds(), 0)
	r.Latency = percentiles(t.Lateness)
	r.applyTally(t)
	if events != nil {
		return s.finishBusiness(ctx, s.business, events, r)
	}
	return nil
}

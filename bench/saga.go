package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus"
)

// SagaStep is the message of the saga workload: step N of instance Seq,
// whose saga is done when it has seen Of distinct steps.
type SagaStep struct {
	Seq int64
	N   int
	Of  int
}

// sagaState is the state of a bench saga instance: the steps it saw, in
// the order it saw them.
type sagaState struct{ Seen []int }

// sagaHot is the number of messages sent at once to one instance after the
// main phase.
const sagaHot = 50

// sagaName is the run's saga name.
func (s *stage) sagaName() string { return "bench_" + s.run }

// sagaDoneKey carries, through a handling attempt, the instance whose last
// step the attempt applied.
type sagaDoneKey struct{}

// sagaReceipts is incoming middleware that reports an instance complete
// once the attempt that applied its last step succeeded: a run that lost a
// race for the instance (and ran again) reports nothing.
func sagaReceipts(report func(seq int64, id string, at time.Time, late time.Duration)) bus.Middleware {
	return func(next bus.PipelineFunc) bus.PipelineFunc {
		return func(ctx context.Context, env *bus.Envelope) error {
			done := new(atomic.Int64)
			done.Store(-1)
			err := next(context.WithValue(ctx, sagaDoneKey{}, done), env)
			if seq := done.Load(); err == nil && seq >= 0 && report != nil {
				report(seq, fmt.Sprint(seq), time.Now(), 0)
			}
			return err
		}
	}
}

// registerSaga puts the bench saga on b: every step starts or updates its
// instance; the step that completes the set marks the attempt for
// sagaReceipts.
func (s *stage) registerSaga(b *bus.Bus) error {
	saga := bus.NewSaga[sagaState](b, s.sagaName())
	return bus.SagaStartedBy(saga, func(m SagaStep) string { return fmt.Sprint(m.Seq) },
		func(ctx context.Context, st *sagaState, m SagaStep) error {
			st.Seen = append(st.Seen, m.N)
			if done, ok := ctx.Value(sagaDoneKey{}).(*atomic.Int64); ok && len(st.Seen) == m.Of {
				done.Store(m.Seq)
			}
			return nil
		})
}

// runSagaWorkload measures sagas: -n instances each receive
// -saga-messages steps, sent at once in random order, handled by
// -instances worker processes (or this one) on a shared store; then
// sagaHot steps go to one instance at once. It checks every instance's
// final state on the store: each step seen exactly once.
func runSagaWorkload(ctx context.Context, s *stage, r *Result) error {
	store, ok := s.persistence.(bus.SagaStore)
	if !ok {
		return fmt.Errorf("-persistence %s does not store sagas", s.o.persistence)
	}
	n, per := s.o.n, s.o.sagaMessages
	r.Instances, r.Outbox = s.o.instances, s.o.outbox
	tr := newTracker(0, n+1) // the hot instance is number n
	s.current.Store(tr)
	defer s.current.Store(nil)
	var conflicts func() uint64
	if s.o.instances > 0 {
		f, err := startWorkers(ctx, s)
		if err != nil {
			return err
		}
		s.fleet = f
		defer f.stop()
		conflicts = func() uint64 { _ = f.stop(); return s.sagaConflicts.Load() }
	} else {
		b, err := s.newBus(false, s.o.handlers, nil)
		if err != nil {
			return err
		}
		if err := b.Start(ctx); err != nil {
			return err
		}
		defer b.Stop(context.WithoutCancel(ctx))
		conflicts = func() uint64 { return b.Metrics().SagaConflicts }
	}
	sender, err := s.newBus(true, 0, nil)
	if err != nil {
		return err
	}
	if err := sender.Start(ctx); err != nil {
		return err
	}
	defer sender.Stop(context.WithoutCancel(ctx))

	steps := make([]SagaStep, 0, n*per)
	for i := range n {
		for k := range per {
			steps = append(steps, SagaStep{Seq: int64(i), N: k, Of: per})
		}
	}
	rand.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	start, cpu0 := time.Now(), selfCPU()+s.workerCPU()
	if err := s.sendSteps(ctx, sender, steps); err != nil {
		return err
	}
	if err := waitSteps(ctx, tr, n, s.o.timeout); err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu := selfCPU() + s.workerCPU() - cpu0
	hot := make([]SagaStep, sagaHot)
	for k := range hot {
		hot[k] = SagaStep{Seq: int64(n), N: k, Of: sagaHot}
	}
	if err := s.sendSteps(ctx, sender, hot); err != nil {
		return err
	}
	select {
	case <-tr.done:
	case <-time.After(s.o.timeout):
	case <-ctx.Done():
		return ctx.Err()
	}
	r.DurationMS = ms(elapsed)
	r.MsgsPerSec = round(float64(n*per)/elapsed.Seconds(), 0)
	r.SagaInstancesPerSec = round(float64(n)/elapsed.Seconds(), 0)
	r.CPUPerMsgUS = cpuPerMsg(cpu, n*per)
	lost, hotSeen, err := s.checkSagas(ctx, store, n, per)
	if err != nil {
		return err
	}
	r.SagaLostUpdates, r.SagaHotCount = &lost, &hotSeen
	r.SagaConflicts = ptr(conflicts())
	t := tr.tally()
	r.Missing, r.Duplicates = t.Missing, t.Duplicates
	if lost > 0 || hotSeen != sagaHot {
		r.Missing += max(lost, 1)
	}
	return nil
}

// sendSteps sends steps from -senders goroutines.
func (s *stage) sendSteps(ctx context.Context, b *bus.Bus, steps []SagaStep) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, s.o.senders)
	for range s.o.senders {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(steps)) {
					return
				}
				if err := b.Send(ctx, steps[i], bus.To(s.endpoint)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitSteps waits until the first n instances reported completion.
func waitSteps(ctx context.Context, tr *tracker, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if t := tr.tally(); t.Received >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return nil // the check of the stored states says what is missing
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// checkSagas loads every instance and counts those whose state does not
// hold each step exactly once (a lost or doubled update), and the steps the
// hot instance saw.
func (s *stage) checkSagas(ctx context.Context, store bus.SagaStore, n, per int) (lost, hot int, err error) {
	name := s.sagaName()
	for i := range n + 1 {
		inst, ok, err := store.LoadSaga(ctx, name, fmt.Sprint(i))
		if err != nil {
			return 0, 0, err
		}
		var st sagaState
		if ok {
			if err := json.Unmarshal(inst.State, &st); err != nil {
				return 0, 0, err
			}
		}
		if i == n {
			hot = len(st.Seen)
			continue
		}
		distinct := map[int]bool{}
		for _, k := range st.Seen {
			distinct[k] = true
		}
		if len(st.Seen) != per || len(distinct) != per {
			lost++
		}
	}
	return lost, hot, nil
}

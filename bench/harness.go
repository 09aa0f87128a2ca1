package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus"
)

// Tick is the message every workload sends: its sequence number, and
// padding that sets the body size.
type Tick struct {
	Seq int64
	Pad string `json:",omitempty"`
}

// stage is what one run works with: the persistence and transport, opened
// once, and the tracker the handler records into.
type stage struct {
	o           *options
	run         string
	endpoint    string
	pd          persistenceDriver
	td          transportDriver
	persistence bus.Persistence
	transport   bus.Transport
	logger      *slog.Logger
	cleanups    []func()
	current     atomic.Pointer[tracker]
	stray       *tracker // receipts while no batch is being measured
	fleet       *fleet   // worker processes, with -instances
	pad         string
	business    *business // the throughput handler's work on PostgreSQL
	// sagaConflicts sums the workers' saga conflicts (saga workload).
	sagaConflicts atomic.Uint64
}

// tracker returns the tracker receipts go to now.
func (s *stage) tracker() *tracker {
	if t := s.current.Load(); t != nil {
		return t
	}
	return s.stray
}

// workerCPU returns the CPU time used so far by the worker processes.
func (s *stage) workerCPU() time.Duration {
	if s.fleet == nil {
		return 0
	}
	return pidCPU(s.fleet.pids())
}

// newRunID returns a short random name for a run's schema, file or queues.
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}

// openStage opens the persistence and transport of run. The owner (the
// parent process) cleans up what the run created; workers only disconnect.
func openStage(ctx context.Context, o *options, run string, owner bool, stderr io.Writer) (*stage, error) {
	level := slog.LevelError
	if o.verbose {
		level = slog.LevelWarn
	}
	s := &stage{
		o: o, run: run, endpoint: "bench-" + run,
		pd: persistences()[o.persistence], td: transports()[o.transport],
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		pad:    padding(o.body), stray: newTracker(0, 0),
	}
	o.logger = s.logger
	o.run = run
	p, cleanup, err := s.pd.open(ctx, o, run, owner)
	if err != nil {
		return nil, fmt.Errorf("open persistence %s: %w", o.persistence, err)
	}
	s.persistence = p
	s.cleanups = append(s.cleanups, cleanup)
	t, cleanup, err := s.td.open(ctx, o, run, owner)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("open transport %s: %w", o.transport, err)
	}
	s.transport = t
	s.cleanups = append(s.cleanups, cleanup)
	return s, nil
}

// close undoes openStage, last opened first.
func (s *stage) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// padding returns the Pad that makes a Tick's JSON body about size bytes.
func padding(size int) string {
	const overhead = len(`{"Seq":12345,"Pad":""}`)
	if size <= overhead {
		return ""
	}
	return strings.Repeat("x", size-overhead)
}

// bodyBytes is the serialized size of a typical Tick of this stage.
func (s *stage) bodyBytes(seq int64) int {
	b, _ := json.Marshal(Tick{Seq: seq, Pad: s.pad})
	return len(b)
}

// newBus returns a bus on the stage's endpoint whose Tick handler records
// every receipt into the current tracker (and into report, when set: the
// worker processes' way of telling the parent).
func (s *stage) newBus(sendOnly bool, handlers int, report func(seq int64, id string, at time.Time, late time.Duration)) (*bus.Bus, error) {
	cfg := bus.Config{
		Endpoint: s.endpoint, Transport: s.transport, Persistence: s.persistence,
		// The run's own error and dead-letter queues: a shared broker never
		// sees two runs (or a run and an application) share one.
		ErrorQueue: s.endpoint + "-error", DeadLetterQueue: s.endpoint + "-deadletter",
		Logger: s.logger, SendOnly: sendOnly, Concurrency: handlers,
		Outbox: bus.OutboxConfig{Enabled: s.o.outbox},
		Dispatcher: bus.DispatcherConfig{
			BatchSize: s.o.dispatch.batch, Concurrency: s.o.dispatch.concurrency, PollInterval: s.o.dispatch.poll,
		},
	}
	if s.o.workload == "saga" && !sendOnly {
		cfg.Incoming = []bus.Middleware{sagaReceipts(func(seq int64, id string, at time.Time, late time.Duration) {
			if report != nil {
				report(seq, id, at, late)
			}
			s.tracker().record(seq, id, at, late)
		})}
	}
	b, err := bus.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := bus.Route[Tick](b, s.endpoint); err != nil {
		return nil, err
	}
	if sendOnly {
		return b, nil
	}
	if s.o.workload == "saga" {
		return b, s.registerSaga(b)
	}
	err = bus.Handle(b, func(ctx context.Context, m Tick) error {
		in := bus.IncomingMessage(ctx)
		if s.business != nil {
			if err := s.business.handle(ctx, b, m, in.ID); err != nil {
				return err
			}
		}
		now := time.Now()
		ref := in.DueAt
		if ref.IsZero() {
			ref = in.SentAt // immediate messages: send→handler latency
		}
		late := now.Sub(ref)
		seq := m.Seq
		if s.o.workload == "runtime-recurring" {
			seq = runtimeSeq(m, in)
		}
		if report != nil {
			report(seq, in.ID, now, late)
		}
		s.tracker().record(seq, in.ID, now, late)
		return nil
	})
	return b, err
}

// scheduleAll sends n Ticks numbered base.. from o.senders goroutines, each
// with the options opt returns for its index, and returns how long it took.
func (s *stage) scheduleAll(ctx context.Context, b *bus.Bus, base int64, n int, opt func(i int) bus.Option) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	senders := min(s.o.senders, max(n, 1))
	start := time.Now()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for i := w; i < n; i += senders {
				if err := b.Send(ctx, Tick{Seq: base + int64(i), Pad: s.pad}, opt(i)); err != nil {
					cancel(fmt.Errorf("send %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return elapsed, err
	}
	return elapsed, nil
}

// await waits until t saw every message or the deadline passed.
func await(ctx context.Context, t *tracker, deadline time.Time) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-t.done:
		return nil
	case <-timer.C:
		return nil // the tally reports what is missing
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leadFor is how long before the first due time scheduling starts: -lead,
// or a generous estimate from the store's cost per message.
func (s *stage) leadFor(n int) time.Duration {
	if s.o.lead > 0 {
		return s.o.lead
	}
	return time.Second + time.Duration(n)*s.pd.storeCost
}

// errLeadTooShort reports a run whose scheduling overran its first due time.
var errLeadTooShort = errors.New("scheduling overran the first due time")

func checkLead(scheduled time.Time, t0 time.Time, took time.Duration) error {
	if scheduled.After(t0) {
		return fmt.Errorf("%w: it took %v; raise -lead", errLeadTooShort, took.Round(time.Millisecond))
	}
	return nil
}

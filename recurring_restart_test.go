package bus_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// stalledStore is one process's view of a shared memory persistence whose
// reads and claims wait while held: that process runs but is behind, as
// one is on a loaded machine.
type stalledStore struct {
	*bus.MemoryPersistence
	mu   sync.Mutex
	held chan struct{} // closed: released
}

// hold makes the reads and claims wait until the returned func is called.
func (s *stalledStore) hold() (release func()) {
	c := make(chan struct{})
	s.mu.Lock()
	s.held = c
	s.mu.Unlock()
	return func() { close(c) }
}

func (s *stalledStore) wait(ctx context.Context) error {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held == nil {
		return nil
	}
	select {
	case <-held:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stalledStore) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	if err := s.wait(ctx); err != nil {
		return bus.RecurringRecord{}, false, err
	}
	return s.MemoryPersistence.LoadRecurring(ctx, name)
}

func (s *stalledStore) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.MemoryPersistence.ListRecurring(ctx)
}

func (s *stalledStore) ClaimDueOutgoing(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.MemoryPersistence.ClaimDueOutgoing(ctx, endpoint, now, limit, lease)
}

// A process that restarts while another one runs but is behind (its
// steps and its dispatcher a second late, so its liveness mark lapsed a
// moment ago) finds the ticks that passed meanwhile late, not missed: the
// occurrences already stored for them are kept, and every tick is sent
// once.
func TestRecurringRestartBesideABehindProcessLosesNoTick(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(recT0)
	tr, shared := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	log := &tickLog{clock: clock}
	slow := &stalledStore{MemoryPersistence: shared}
	start := func(p bus.Persistence) *bus.Bus {
		b, err := bus.New(bus.Config{Endpoint: "worker", Transport: tr, Persistence: p, Clock: clock, Logger: quiet(),
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Handle(b, log.handle); err != nil {
			t.Fatal(err)
		}
		if err := b.AddRecurring(every200(bus.MissedOnce)); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Stop(context.Background()) })
		return b
	}
	start(slow)
	restarted := start(shared)
	all := func(now time.Time) int { return len(ticksIn(200*time.Millisecond, recT0, now)) }
	walk(t, clock, log, 4, 25*time.Millisecond, recT0.Add(time.Second), all)
	if err := restarted.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !clock.WaitForTimers(ctxT(t), 2) {
		t.Fatal("the running bus never went to sleep")
	}
	// The running process falls a second behind: its next step and its
	// dispatcher's next claim wait, while the restarted one starts.
	release := slow.hold()
	clock.Advance(time.Second)
	start(shared)
	release()
	end := clock.Now().Add(time.Second)
	walk(t, clock, log, 4, 25*time.Millisecond, end, all)
	ticks, _ := log.snapshot()
	slices.SortFunc(ticks, time.Time.Compare)
	want := ticksIn(200*time.Millisecond, recT0, end)
	if !slices.EqualFunc(ticks, want, time.Time.Equal) {
		t.Fatalf("ticks sent:\n%v\nwant each of\n%v\nonce", ticks, want)
	}
}

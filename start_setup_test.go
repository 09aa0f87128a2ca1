package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// setupFlakyStore is a persistence whose Setup fails with the errors of fails,
// one per call, and then succeeds.
type setupFlakyStore struct {
	*bus.MemoryPersistence
	mu       sync.Mutex
	fails    []error
	calls    int
	deadline bool // every call's ctx had a deadline
}

func newSetupFlakyStore(fails ...error) *setupFlakyStore {
	return &setupFlakyStore{MemoryPersistence: bus.NewMemoryPersistence(), fails: fails, deadline: true}
}

func (s *setupFlakyStore) Setup(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		s.deadline = false
	}
	s.calls++
	if len(s.fails) == 0 {
		return nil
	}
	err := s.fails[0]
	if len(s.fails) > 1 {
		s.fails = s.fails[1:]
	}
	if err == nil {
		s.fails = nil
	}
	return err
}

func (s *setupFlakyStore) String() string { return "flaky db.example:5432/app" }

func (s *setupFlakyStore) setupCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// recordingClock is a fake clock that remembers the durations of the
// timers made on it.
type recordingClock struct {
	*bustest.FakeClock
	mu    sync.Mutex
	waits []time.Duration
}

func (c *recordingClock) NewTimer(d time.Duration) bus.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return c.FakeClock.NewTimer(d)
}

func (c *recordingClock) lastWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waits[len(c.waits)-1]
}

var (
	errStoreRefused  = bus.StoreUnavailable(errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"))
	errStoreStarting = bus.StoreUnavailable(errors.New("FATAL: the database system is starting up (SQLSTATE 57P03)"))
)

// TestStartRetriesUnreachableStore: Start retries the persistence's Setup
// while it fails with an error matching ErrStoreUnavailable, waiting
// 100 ms doubling to 2 s (each wait in its upper half), logs each distinct
// failure once at Warn with the store's description, and succeeds when
// Setup does.
func TestStartRetriesUnreachableStore(t *testing.T) {
	t.Parallel()
	fails := []error{errStoreRefused, errStoreRefused, errStoreRefused, errStoreStarting, errStoreStarting, errStoreRefused, errStoreRefused, errStoreRefused}
	store := newSetupFlakyStore(append(fails, nil)...)
	clock := &recordingClock{FakeClock: bustest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	var logs bustest.LogBuffer
	b, err := bus.New(bus.Config{Endpoint: "sales", Persistence: store, Clock: clock, SendOnly: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	done := make(chan error, 1)
	go func() { done <- b.Start(context.Background()) }()
	ctx := ctxT(t)
	for range fails {
		if !clock.WaitForTimers(ctx, 1) {
			t.Fatalf("Start did not wait after failed Setup %d", store.setupCalls())
		}
		clock.Advance(clock.lastWait())
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("Start did not return after Setup succeeded")
	}
	if err != nil {
		t.Fatalf("Start = %v, want nil once Setup succeeds", err)
	}
	if n := store.setupCalls(); n != len(fails)+1 {
		t.Errorf("Setup called %d times, want %d", n, len(fails)+1)
	}
	if !store.deadline {
		t.Error("Setup ran without the StartTimeout deadline")
	}
	for i, w := range clock.waits {
		upper := min(100*time.Millisecond<<i, 2*time.Second)
		if w < upper/2 || w > upper {
			t.Errorf("wait %d = %v, want in [%v, %v]", i+1, w, upper/2, upper)
		}
	}
	text := logs.String()
	if n := strings.Count(text, "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want one per distinct failure (2):\n%s", n, text)
	}
	for _, want := range []string{"connection refused", "starting up", `store="flaky db.example:5432/app"`, "setup done"} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %q:\n%s", want, text)
		}
	}
}

// TestStartFailsAtOnceOnPermanentStoreError: a Setup error that does not
// match ErrStoreUnavailable (a wrong password) fails Start at once.
func TestStartFailsAtOnceOnPermanentStoreError(t *testing.T) {
	t.Parallel()
	denied := errors.New("FATAL: password authentication failed for user \"app\" (SQLSTATE 28P01)")
	store := newSetupFlakyStore(denied)
	clock := &recordingClock{FakeClock: bustest.NewFakeClock(time.Now())}
	b, err := bus.New(bus.Config{Endpoint: "sales", Persistence: store, Clock: clock, SendOnly: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	err = b.Start(ctxT(t))
	if !errors.Is(err, denied) || errors.Is(err, bus.ErrStoreUnavailable) || errors.Is(err, bus.ErrStartTimeout) {
		t.Errorf("Start = %v, want the Setup error, not ErrStoreUnavailable", err)
	}
	if n := store.setupCalls(); n != 1 || len(clock.waits) != 0 {
		t.Errorf("Setup called %d times with %d waits, want once and none", n, len(clock.waits))
	}
}

// TestStartStoreUnreachablePastStartTimeout: a store still unreachable
// when StartTimeout ends fails Start with an error matching
// ErrStoreUnavailable and ErrStartTimeout that says how long Start waited
// and carries the last failure.
func TestStartStoreUnreachablePastStartTimeout(t *testing.T) {
	t.Parallel()
	store := newSetupFlakyStore(errStoreRefused)
	b, err := bus.New(bus.Config{Endpoint: "sales", Persistence: store, SendOnly: true, Logger: quiet(),
		StartTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	began := time.Now()
	err = b.Start(context.Background())
	took := time.Since(began)
	if !errors.Is(err, bus.ErrStoreUnavailable) || !errors.Is(err, bus.ErrStartTimeout) || !errors.Is(err, errStoreRefused) {
		t.Fatalf("Start = %v, want ErrStoreUnavailable and ErrStartTimeout with the last failure", err)
	}
	if took < 500*time.Millisecond {
		t.Errorf("Start gave up after %v, before StartTimeout", took)
	}
	for _, want := range []string{"flaky db.example:5432/app", "still unreachable after", "StartTimeout 500ms", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start = %q, lacks %q", err, want)
		}
	}
	if n := store.setupCalls(); n < 2 {
		t.Errorf("Setup called %d times within StartTimeout, want retries", n)
	}
}

// TestStartStoreUnreachableUntilCtxEnds: Start's ctx ending while the
// store is unreachable ends the wait; the error matches the ctx's and the
// last failure.
func TestStartStoreUnreachableUntilCtxEnds(t *testing.T) {
	t.Parallel()
	store := newSetupFlakyStore(errStoreRefused)
	b, err := bus.New(bus.Config{Endpoint: "sales", Persistence: store, SendOnly: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = b.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, bus.ErrStoreUnavailable) ||
		errors.Is(err, bus.ErrStartTimeout) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want ctx's error and the last failure", err)
	}
}

func TestStoreUnavailableMarks(t *testing.T) {
	t.Parallel()
	if bus.StoreUnavailable(nil) != nil {
		t.Error("StoreUnavailable(nil) != nil")
	}
	inner := errors.New("connection refused")
	err := bus.StoreUnavailable(inner)
	if !errors.Is(err, bus.ErrStoreUnavailable) || !errors.Is(err, inner) || err.Error() != inner.Error() {
		t.Errorf("StoreUnavailable(%v) = %v", inner, err)
	}
}

// provisionLater is a transport whose Provision fails with the errors of
// fails, one per call, and then succeeds.
type provisionLater struct {
	*bus.MemoryTransport
	mu    sync.Mutex
	fails []error
	calls int
}

func (p *provisionLater) Provision(ctx context.Context, topo bus.Topology) error {
	p.mu.Lock()
	p.calls++
	var err error
	if len(p.fails) > 0 {
		err, p.fails = p.fails[0], p.fails[1:]
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return p.MemoryTransport.Provision(ctx, topo)
}

// TestStartRetriesProvisionWhileStoreUnreachable: a transport kept in a
// database (the PostgreSQL transport) marks its failures to reach it with
// StoreUnavailable, and Start retries its Provision as it does Setup; an
// unmarked failure fails Start at once.
func TestStartRetriesProvisionWhileStoreUnreachable(t *testing.T) {
	t.Parallel()
	tr := &provisionLater{MemoryTransport: bus.NewMemoryTransport(), fails: []error{errStoreRefused, errStoreRefused}}
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Logger: quiet(), SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	if err := b.Start(ctxT(t)); err != nil || tr.calls != 3 {
		t.Errorf("Start = %v after %d Provision calls, want nil after 3", err, tr.calls)
	}

	bad := errors.New("invalid queue name")
	tr2 := &provisionLater{MemoryTransport: bus.NewMemoryTransport(), fails: []error{bad}}
	b2, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr2, Logger: quiet(), SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Stop(context.Background()) })
	if err := b2.Start(ctxT(t)); !errors.Is(err, bad) || errors.Is(err, bus.ErrStoreUnavailable) || tr2.calls != 1 {
		t.Errorf("Start = %v after %d Provision calls, want the error at once", err, tr2.calls)
	}
}

package storetest

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// FailoverRows is how many rows the failover tests store.
const FailoverRows = 20

// Failover is what the claim failover tests need beyond Workers.
type Failover struct {
	Workers
	// Held counts the rows of the store's table and those of them that
	// no claim holds (a SKIP LOCKED probe finds them, or their lease is
	// over).
	Held func(ctx context.Context) (total, free int, err error)
	// Takeover returns a store of this process on the same table, for the
	// bus that takes the rows over.
	Takeover func(t *testing.T) bus.Persistence
}

// waitHeld waits until a worker holds every row.
func (f Failover) waitHeld(t *testing.T, ctx context.Context) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		total, free, err := f.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if total == FailoverRows && free == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never held all rows: %d rows, %d free", total, free)
		}
	}
}

// receipts counts what the workers' handlers recorded.
func (f Failover) receipts(t *testing.T, ctx context.Context) int {
	t.Helper()
	rs, err := f.Receipts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(rs)
}

// Killed runs a worker that claims the rows and blocks its hand-overs,
// with a 30 s lease, and SIGKILLs it: a bus in this process hands every
// row over within 2 s of the kill, not before it is due, exactly once.
// Claims hold their rows locked in an open transaction: a killed
// process's connection closes and the server frees its rows at once.
func (f Failover) Killed(t *testing.T) {
	ctx := drivertest.Ctx(t, 3*time.Minute)
	due := time.Now().Add(3 * time.Second)
	if err := f.Store.StoreOutgoing(ctx, Ticks(FailoverRows, due, 0)); err != nil {
		t.Fatal(err)
	}
	worker, lines := f.Start(t, WorkerSpec{Name: "killed", Lease: 30 * time.Second, HangAfter: -1}, nil)
	f.waitHeld(t, ctx)
	WaitLine(t, lines, "hung", 2*time.Minute) // the worker is handing the rows over, blocked
	time.Sleep(time.Until(due.Add(500 * time.Millisecond)))
	f.waitHeld(t, ctx)
	tr := StartHandOvers(t, f.Takeover(t))
	time.Sleep(time.Second) // the test's bus polls, finding the rows held
	if n := len(tr.Snapshot()); n != 0 {
		t.Fatalf("the test's bus handed over %d rows the worker held", n)
	}
	killed := time.Now()
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	tr.Wait(t, FailoverRows, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // room for a duplicate to show
	last := tr.Check(t, FailoverRows, Always(due))
	if after := last.Sub(killed); after > 2*time.Second {
		t.Errorf("the last row was handed over %v after the kill, want within 2 s", after.Round(time.Millisecond))
	} else {
		t.Logf("every row handed over within %v of the kill", after.Round(time.Millisecond))
	}
	if n := f.receipts(t, ctx); n != 0 {
		t.Errorf("the killed worker recorded %d receipts, want none (its handler blocked)", n)
	}
}

// FreezeTiming is the timing of Frozen.
type FreezeTiming struct {
	Due    time.Duration // the rows fall due this long after they are stored
	Lease  time.Duration // the worker's lease
	Window time.Duration // the worker's look-ahead window
	Margin time.Duration // slack on window + lease for the hand-over
}

// Frozen runs a worker that claims the rows ahead of their due time and
// SIGSTOPs it: the server ends its idle claim once it has idled for the
// window and the lease, a bus in this process hands every row over within
// those and the margin, not before it is due, and the worker, woken,
// hands over none of them.
func (f Failover) Frozen(t *testing.T, ft FreezeTiming) {
	ctx := drivertest.Ctx(t, 3*time.Minute)
	due := time.Now().Add(ft.Due)
	if err := f.Store.StoreOutgoing(ctx, Ticks(FailoverRows, due, 0)); err != nil {
		t.Fatal(err)
	}
	worker, _ := f.Start(t, WorkerSpec{Name: "frozen", Lease: ft.Lease, LookAhead: ft.Window}, nil)
	f.waitHeld(t, ctx)
	stopped := time.Now()
	if err := worker.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !stopped.Before(due.Add(-500 * time.Millisecond)) {
		t.Fatalf("the worker held the rows only %v before their due time; this machine is too slow for the test", due.Sub(stopped))
	}
	tr := StartHandOvers(t, f.Takeover(t))
	tr.Wait(t, FailoverRows, time.Minute)
	for id, at := range tr.Snapshot() {
		if after := at[0].Sub(stopped); after > ft.Window+ft.Lease+ft.Margin {
			t.Errorf("row %s handed over %v after the freeze, want within the window and the lease (%v) and %v",
				id, after.Round(time.Millisecond), ft.Window+ft.Lease, ft.Margin)
		}
	}
	last := tr.Check(t, FailoverRows, Always(due))
	t.Logf("every row handed over within %v of the freeze (window %v, lease %v)", last.Sub(stopped).Round(time.Millisecond), ft.Window, ft.Lease)
	if err := worker.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the woken worker's dispatcher runs on
	tr.Check(t, FailoverRows, Always(due))
	if n := f.receipts(t, ctx); n != 0 {
		t.Errorf("the woken worker handed over %d rows that the test's bus had handed over", n)
	}
	_ = worker.Process.Signal(syscall.SIGTERM)
	if err := worker.Wait(); err != nil {
		t.Logf("worker exit: %v", err)
	}
}

// HandOvers is a transport that records when each message was handed
// over; its identity is the workers', so its bus dispatches the same rows.
type HandOvers struct {
	*bus.MemoryTransport
	mu   sync.Mutex
	sent map[string][]time.Time
}

// Identity is TransportIdentity.
func (h *HandOvers) Identity() string { return TransportIdentity }

// Send records when env was handed over.
func (h *HandOvers) Send(_ context.Context, _ string, env *bus.Envelope) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent[env.ID] = append(h.sent[env.ID], time.Now())
	return nil
}

// Snapshot returns when each message was handed over, by ID.
func (h *HandOvers) Snapshot() map[string][]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]time.Time, len(h.sent))
	for id, at := range h.sent {
		out[id] = append([]time.Time(nil), at...)
	}
	return out
}

// StartHandOvers starts a bus in the test process on p, a store on the
// workers' table, whose transport records its hand-overs. It is stopped
// at cleanup.
func StartHandOvers(t *testing.T, p bus.Persistence) *HandOvers {
	t.Helper()
	tr := &HandOvers{MemoryTransport: bus.NewMemoryTransport(), sent: map[string][]time.Time{}}
	b, err := bus.New(bus.Config{Endpoint: "failover-test", Transport: tr, Persistence: p, SkipSetup: true,
		Logger: drivertest.Logger(), Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return tr
}

// Wait waits until n rows were handed over at least once.
func (h *HandOvers) Wait(t *testing.T, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		got := len(h.Snapshot())
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d of %d rows handed over", within, got, n)
		}
	}
}

// Check fails t unless n rows were handed over, each once, none before
// notBefore(id), and returns when the last one was.
func (h *HandOvers) Check(t *testing.T, n int, notBefore func(id string) time.Time) time.Time {
	t.Helper()
	var last time.Time
	got := h.Snapshot()
	for id, at := range got {
		if len(at) != 1 {
			t.Errorf("row %s handed over %d times, want once", id, len(at))
		}
		for _, a := range at {
			if due := notBefore(id); a.Before(due) {
				t.Errorf("row %s handed over %v before it was due", id, due.Sub(a))
			}
			if a.After(last) {
				last = a
			}
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct rows handed over, want %d", len(got), n)
	}
	return last
}

// Always returns a notBefore of Check that is t for every row.
func Always(t time.Time) func(string) time.Time { return func(string) time.Time { return t } }

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// killN is how many messages the worker holds when it is signalled: as
// many as its handlers, so every one is mid-handling.
const killN = 5

// startHolder provisions a queue, starts the worker on it with args and
// sends killN messages, and returns once the worker printed "got" for each.
func startHolder(t *testing.T, pool *pgxpool.Pool, bin string, args ...string) (*exec.Cmd, <-chan string, *postgres.Transport, string, []string) {
	t.Helper()
	ctx := drivertest.Ctx(t, 2*time.Minute)
	schema := freshSchema(t, pool)
	queue := bustest.Namespace() + "-held"
	sender := newTransport(t, pool, schema, postgres.TransportOptions{})
	if err := sender.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-schema", schema, "-queue", queue, "-concurrency", fmt.Sprint(killN)}, args...)
	cmd, lines := startWorker(t, bin, args...)
	ids := make([]string, killN)
	for i := range ids {
		ids[i] = fmt.Sprintf("held-%d", i)
		if err := sender.Send(ctx, queue, envelopeTo(queue, ids[i])); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for len(got) < killN {
		select {
		case line := <-lines:
			if id, ok := strings.CutPrefix(line, "got "); ok {
				got[id] = true
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the worker got %d of %d messages", len(got), killN)
		}
	}
	return cmd, lines, sender, queue, ids
}

// arrivals records when each message reached a handler, and how often.
type arrivals struct {
	mu    sync.Mutex
	at    map[string][]time.Time
	count chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{at: map[string][]time.Time{}, count: make(chan struct{}, 100)}
}

func (a *arrivals) add(id string) {
	a.mu.Lock()
	a.at[id] = append(a.at[id], time.Now())
	a.mu.Unlock()
	a.count <- struct{}{}
}

func (a *arrivals) wait(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for range n {
		select {
		case <-a.count:
		case <-deadline:
			a.mu.Lock()
			defer a.mu.Unlock()
			t.Fatalf("%d of %d messages arrived within %v", len(a.at), n, within)
		}
	}
}

// A consumer killed (SIGKILL) mid-handling, with the default 30 s lease,
// has its messages handed to another consumer within 2 s each: its
// liveness lock ended with its process.
func TestTransportConsumerKilled(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := buildWorker(t, "transproc")
	cmd, _, sender, queue, ids := startHolder(t, pool, bin)
	ctx := drivertest.Ctx(t, time.Minute)

	// Started after the worker holds every message, so it can only get
	// them from the worker's claims.
	tr := newTransport(t, pool, strings.Trim(strings.Split(sender.MessagesTable(), ".")[0], `"`), postgres.TransportOptions{Lease: postgres.DefaultLease})
	got := newArrivals()
	receiveAll(t, tr, queue, killN, func(ctx context.Context, env *bus.Envelope) error {
		got.add(env.ID)
		return nil
	})
	time.Sleep(300 * time.Millisecond) // the receiver is polling
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	got.wait(t, killN, 20*time.Second)
	waitFor(t, func() bool { return queueRows(t, ctx, pool, sender, queue) == 0 })
	time.Sleep(500 * time.Millisecond) // a duplicate would show
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, id := range ids {
		at := got.at[id]
		if len(at) != 1 {
			t.Errorf("%s delivered %d times after the kill, want 1", id, len(at))
			continue
		}
		if d := at[0].Sub(killed); d > 2*time.Second {
			t.Errorf("%s redelivered %v after the kill, want within 2s", id, d.Round(time.Millisecond))
		} else {
			t.Logf("%s redelivered %v after the kill", id, d.Round(time.Millisecond))
		}
	}
}

// A consumer frozen (SIGSTOP) mid-handling keeps its connections, so its
// liveness lock: its messages go to another consumer only once their
// (3 s) lease lapsed. Woken (SIGCONT), its handlers return nil, but their
// acknowledgements find the rows another consumer's: the messages are
// acknowledged once, by the other consumer.
func TestTransportConsumerFrozen(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := buildWorker(t, "transproc")
	const lease = 3 * time.Second
	cmd, lines, sender, queue, ids := startHolder(t, pool, bin, "-lease", lease.String(), "-hold", "4s")
	ctx := drivertest.Ctx(t, time.Minute)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { _ = cmd.Process.Signal(syscall.SIGCONT) }
	defer cont()
	tr := newTransport(t, pool, strings.Trim(strings.Split(sender.MessagesTable(), ".")[0], `"`), postgres.TransportOptions{Lease: lease})
	got := newArrivals()
	release := make(chan struct{})
	var cancelled sync.Map
	receiveAll(t, tr, queue, killN, func(ctx context.Context, env *bus.Envelope) error {
		got.add(env.ID)
		select {
		case <-release:
		case <-ctx.Done():
			cancelled.Store(env.ID, context.Cause(ctx))
			return context.Cause(ctx)
		}
		return nil
	})
	got.wait(t, killN, 30*time.Second)
	got.mu.Lock()
	for _, id := range ids {
		// The worker's heartbeat may have extended the lease up to Lease/3
		// before the stop: it lapses between 2 s and 3 s after it.
		if d := got.at[id][0].Sub(stopped); d < lease*2/3-300*time.Millisecond {
			t.Errorf("%s taken from the frozen consumer %v after SIGSTOP, before its lease lapsed", id, d.Round(time.Millisecond))
		} else {
			t.Logf("%s taken from the frozen consumer %v after SIGSTOP", id, d.Round(time.Millisecond))
		}
	}
	got.mu.Unlock()

	cont()
	returned := 0
	for returned < killN {
		select {
		case line := <-lines:
			if rest, ok := strings.CutPrefix(line, "returned "); ok {
				returned++
				t.Logf("woken worker: %s", rest)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the woken worker's handlers returned %d of %d", returned, killN)
		}
	}
	time.Sleep(time.Second) // the worker's acknowledgements run
	if n := queueRows(t, ctx, pool, sender, queue); n != killN {
		t.Fatalf("%d rows left after the woken worker's acknowledgements, want %d (held by the other consumer)", n, killN)
	}
	close(release)
	waitFor(t, func() bool { return queueRows(t, ctx, pool, sender, queue) == 0 })
	cancelled.Range(func(id, cause any) bool {
		t.Errorf("the other consumer's delivery of %v was cancelled: %v", id, cause)
		return true
	})
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, id := range ids {
		if n := len(got.at[id]); n != 1 {
			t.Errorf("%s delivered %d times to the other consumer, want 1", id, n)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("worker: %v", err)
	}
}

func queueRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tr *postgres.Transport, queue string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tr.MessagesTable()+` WHERE queue = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

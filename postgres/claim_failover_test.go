package postgres_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// TestClaimFailover runs a worker process that claims rows and holds them,
// then kills or freezes it, and checks when a bus in the test process
// hands the rows over. Claims hold their rows locked in an open
// transaction: a killed process's connection closes and the server frees
// its rows at once; a frozen process's transaction is ended by the server
// once it has idled for the look-ahead window and the lease.
func TestClaimFailover(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process failover test skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := filepath.Join(t.TempDir(), "multiproc")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./internal/multiproc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("Killed", func(t *testing.T) {
		t.Parallel()
		claimKilled(t, pool, bin)
	})
	t.Run("Frozen", func(t *testing.T) {
		t.Parallel()
		claimFrozen(t, pool, bin)
	})
}

const failoverN = 20

// failoverSetup makes a fresh store with the worker's receipts and claims
// tables, and stores failoverN rows due at due for the worker's transport.
func failoverSetup(t *testing.T, ctx context.Context, pool *pgxpool.Pool, due time.Time) (*postgres.Persistence, string, string) {
	t.Helper()
	p := newStore(t, pool, postgres.Options{})
	schema := strings.Trim(strings.Split(p.Table(), ".")[0], `"`)
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	for _, ddl := range []string{
		`CREATE TABLE ` + receipts + ` (msg_id text NOT NULL, n int NOT NULL, proc text NOT NULL,
			due_at timestamptz NOT NULL, received_at timestamptz NOT NULL)`,
		`CREATE TABLE ` + pgx.Identifier{schema, "claims"}.Sanitize() + ` (msg_id text NOT NULL, proc text NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	msgs := make([]bus.OutgoingMessage, failoverN)
	for i := range msgs {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i)
		env := &bus.Envelope{ID: id, Type: "multiproc.Tick", Kind: bus.KindCommand,
			Body: fmt.Appendf(nil, `{"N":%d}`, i), ContentType: "application/json",
			Source: "failover-test", Destination: "multiproc", SentAt: time.Now().UTC(), DueAt: due}
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: due,
			Transport: "multiproc-sync"}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	return p, schema, receipts
}

// waitHeld waits until every row of p's table is held by a claim: a SKIP
// LOCKED probe finds none of them free (nor leased, as claims of earlier
// versions held rows, so that the test runs, and fails, against them).
func waitHeld(t *testing.T, ctx context.Context, pool *pgxpool.Pool, p *postgres.Persistence) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var total, free int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+p.Table()+`),
			(SELECT count(*) FROM (SELECT 1 FROM `+p.Table()+`
				WHERE lease_token IS NULL OR lease_until <= now() FOR KEY SHARE SKIP LOCKED) AS f)`).Scan(&total, &free)
		if err != nil {
			t.Fatal(err)
		}
		if total == failoverN && free == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never held all rows: %d rows, %d free", total, free)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// handOvers is a transport that records when each message was handed
// over; its identity is the worker's, so its bus dispatches the same rows.
type handOvers struct {
	*bus.MemoryTransport
	mu   sync.Mutex
	sent map[string][]time.Time
}

func (h *handOvers) Identity() string { return "multiproc-sync" }

func (h *handOvers) Send(_ context.Context, _ string, env *bus.Envelope) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent[env.ID] = append(h.sent[env.ID], time.Now())
	return nil
}

func (h *handOvers) snapshot() map[string][]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]time.Time, len(h.sent))
	for id, at := range h.sent {
		out[id] = append([]time.Time(nil), at...)
	}
	return out
}

// startTakeover starts a bus in the test process on p's table.
func startTakeover(t *testing.T, pool *pgxpool.Pool, schema string) *handOvers {
	t.Helper()
	store, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	tr := &handOvers{MemoryTransport: bus.NewMemoryTransport(), sent: map[string][]time.Time{}}
	b, err := bus.New(bus.Config{Endpoint: "failover-test", Transport: tr, Persistence: store,
		Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second}})
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

// waitAll waits until failoverN rows were handed over at least once.
func waitAll(t *testing.T, tr *handOvers, within time.Duration) map[string][]time.Time {
	t.Helper()
	return waitN(t, tr, failoverN, within)
}

// waitN waits until n rows were handed over at least once.
func waitN(t *testing.T, tr *handOvers, n int, within time.Duration) map[string][]time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := tr.snapshot()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d of %d rows handed over", within, len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workerReceipts counts what the worker's handler recorded.
func workerReceipts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, receipts string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+receipts).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A worker killed while it holds claimed rows, its hand-overs blocked and
// a 30 s lease: the test's bus hands every row over within 2 s of the
// kill, not before it is due, exactly once.
func claimKilled(t *testing.T, pool *pgxpool.Pool, bin string) {
	ctx := ctxTimeout(t, 3*time.Minute)
	due := time.Now().Add(3 * time.Second)
	p, schema, receipts := failoverSetup(t, ctx, pool, due)
	worker, _ := startWorker(t, bin, "run", "-schema", schema, "-name", "killed", "-lease", "30s", "-block")
	waitHeld(t, ctx, pool, p)
	time.Sleep(time.Until(due.Add(500 * time.Millisecond))) // the worker is handing the rows over, blocked
	waitHeld(t, ctx, pool, p)
	tr := startTakeover(t, pool, schema)
	time.Sleep(time.Second) // the test's bus polls, finding the rows held
	if n := len(tr.snapshot()); n != 0 {
		t.Fatalf("the test's bus handed over %d rows the worker held", n)
	}
	killed := time.Now()
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	waitAll(t, tr, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // room for a duplicate to show
	got := tr.snapshot()
	var last time.Duration
	for id, at := range got {
		if len(at) != 1 {
			t.Errorf("row %s handed over %d times", id, len(at))
		}
		if at[0].Before(due) {
			t.Errorf("row %s handed over at %v, before it was due at %v", id, at[0], due)
		}
		after := at[0].Sub(killed)
		last = max(last, after)
		if after > 2*time.Second {
			t.Errorf("row %s handed over %v after the kill, want within 2 s", id, after.Round(time.Millisecond))
		}
	}
	t.Logf("every row handed over within %v of the kill", last.Round(time.Millisecond))
	if n := workerReceipts(t, ctx, pool, receipts); n != 0 {
		t.Errorf("the killed worker recorded %d receipts, want none (its handler blocked)", n)
	}
}

// A worker frozen (SIGSTOP) while it holds rows claimed ahead of their due
// time, with a 3 s lease and a 2 s window: the server ends its idle claim
// transaction and the test's bus hands the rows over within the window
// and the lease of the freeze; the worker, woken, hands over none of them.
func claimFrozen(t *testing.T, pool *pgxpool.Pool, bin string) {
	const lease, window = 3 * time.Second, 2 * time.Second
	ctx := ctxTimeout(t, 3*time.Minute)
	due := time.Now().Add(4 * time.Second)
	p, schema, receipts := failoverSetup(t, ctx, pool, due)
	worker, _ := startWorker(t, bin, "run", "-schema", schema, "-name", "frozen", "-lease", lease.String(), "-lookahead", window.String())
	waitHeld(t, ctx, pool, p)
	stopped := time.Now()
	if err := worker.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !stopped.Before(due.Add(-500 * time.Millisecond)) {
		t.Fatalf("the worker held the rows only %v before their due time; this machine is too slow for the test", due.Sub(stopped))
	}
	tr := startTakeover(t, pool, schema)
	got := waitAll(t, tr, time.Minute)
	var last time.Duration
	const margin = 3 * time.Second
	for id, at := range got {
		if at[0].Before(due) {
			t.Errorf("row %s handed over at %v, before it was due at %v", id, at[0], due)
		}
		after := at[0].Sub(stopped)
		last = max(last, after)
		if after > window+lease+margin {
			t.Errorf("row %s handed over %v after the freeze, want within the window and the lease (%v) and %v", id, after.Round(time.Millisecond), window+lease, margin)
		}
	}
	t.Logf("every row handed over within %v of the freeze (window %v, lease %v)", last.Round(time.Millisecond), window, lease)
	if err := worker.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the woken worker's dispatcher runs on
	for id, at := range tr.snapshot() {
		if len(at) != 1 {
			t.Errorf("row %s handed over %d times by the test's bus", id, len(at))
		}
	}
	if n := workerReceipts(t, ctx, pool, receipts); n != 0 {
		t.Errorf("the woken worker handed over %d rows that the test's bus had handed over", n)
	}
	_ = worker.Process.Signal(syscall.SIGTERM)
	if err := worker.Wait(); err != nil {
		t.Logf("worker exit: %v", err)
	}
}

package e2e_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/e2e/internal/pgcluster"
	"github.com/postbus/bus/internal/drivertest"
)

// The TestFault tests break services that they own: a PostgreSQL cluster
// of their own (internal/pgcluster), the TCP proxy between their transport
// and RabbitMQ (the core's internal/faultproxy), a worker process. None of them calls
// t.Parallel: Go runs every sequential top-level test of a package before
// it resumes the parallel ones, so each fault test runs alone and its
// timing (faults land while messages fall due) does not depend on the load
// of the other tests.

// ownPostgres starts a throwaway PostgreSQL cluster in the test's temporary
// directory, stopped at cleanup. Without initdb it skips the test (fails
// under CI=true).
func ownPostgres(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(ctxT(t, 2*time.Minute), t.TempDir())
	if errors.Is(err, pgcluster.ErrUnavailable) {
		bustest.SkipOutsideCI(t, "the PostgreSQL fault test needs a server of its own: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop the test's PostgreSQL: %v", err)
		}
	})
	return c
}

// restartPostgres restarts the test's own cluster and waits until pool
// can query again. It returns how long the database was away.
func restartPostgres(t testing.TB, c *pgcluster.Cluster, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.Restart(ctxT(t, 2*time.Minute)); err != nil {
		t.Fatalf("restart the test's PostgreSQL: %v", err)
	}
	drivertest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var one int
		return pool.QueryRow(ctx, "SELECT 1").Scan(&one) == nil
	}, "PostgreSQL back after the restart")
	return time.Since(start)
}

// TestFaultPostgresRestart restarts the test's own PostgreSQL while 5,000 scheduled
// messages fall due: every message is delivered at least
// once and none early. Rows whose deletion failed during the restart come
// back after the lease: duplicates, never losses.
func TestFaultPostgresRestart(t *testing.T) {
	const n, spread = 5000, 5 * time.Second
	pg := ownPostgres(t)
	pool := newPoolAt(t, pg.URL(), 10)
	store := newStore(t, pool, freshSchema(t, pool))
	rec := newRecorder()
	b := startBus(t, bus.Config{
		Endpoint: "pbe2e-pgrestart-" + suffix(), Persistence: store, Concurrency: 8,
		Dispatcher: bus.DispatcherConfig{Lease: 3 * time.Second},
	}, func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	})
	// A lead time far beyond what scheduling takes, even on a loaded
	// machine: every message must go through the store.
	start := time.Now()
	first := start.Add(8 * time.Second)
	schedule(t, rec, []*bus.Bus{b}, b.Endpoint(), "pg", n, first, spread)
	t.Logf("scheduled %d messages in %v", n, time.Since(start).Round(time.Millisecond))
	if m := b.Metrics(); m.Scheduled != n {
		t.Fatalf("%d of %d messages went through the store; the rest were late and sent at once", m.Scheduled, n)
	}
	drivertest.Eventually(t, 60*time.Second, func() bool { return rec.received() >= n/5 }, "the first messages handled")
	before := rec.received()
	away := restartPostgres(t, pg, pool)
	t.Logf("PostgreSQL restarted after %d of %d messages; back in %v", before, n, away.Round(time.Millisecond))
	if !time.Now().Before(first.Add(spread)) {
		t.Logf("note: the restart ended after the last due time")
	}
	rec.waitAll(t, 2*time.Minute)
	waitStoreEmpty(t, pool, store.Table())
	rec.check(t, false)
}

// TestFaultRabbitMQConnectionsClosed drops the transport's broker
// connections twice, at the TCP proxy between the transport and RabbitMQ,
// while a few thousand due messages are being dispatched and handled:
// every message is delivered at least once, none early. The broker and its
// other clients are untouched.
func TestFaultRabbitMQConnectionsClosed(t *testing.T) {
	const n, spread = 3000, 10 * time.Second
	k := rabbitKit(t)
	proxy := rabbitProxy(t)
	pool := newPool(t, 10)
	store := newStore(t, pool, freshSchema(t, pool))
	rec := newRecorder()
	cfg := k.config(k.newTransport(t, proxy.Addr()), store)
	cfg.Dispatcher.Lease = 5 * time.Second
	b := startBus(t, cfg, func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	})
	first := time.Now().Add(5 * time.Second)
	schedule(t, rec, []*bus.Bus{b}, k.endpoint, "rmq", n, first, spread)
	handled := 0
	for round := range 2 {
		// Drop the connections while messages flow: after the first
		// messages, then once the transport reconnected and made progress.
		drivertest.Eventually(t, 60*time.Second, func() bool {
			return rec.received() >= handled+n/20 && proxy.Active() > 0
		}, "progress and a connection before drop %d", round+1)
		dropped := proxy.Active()
		proxy.Cut()
		proxy.Restore()
		handled = rec.received()
		t.Logf("dropped %d connections with %d of %d messages handled, %d dispatched", dropped, handled, n, b.Metrics().Dispatched)
		if handled == n {
			t.Errorf("connections dropped after every message was handled: the fault came too late to test anything")
		}
	}
	rec.waitAll(t, 2*time.Minute)
	waitStoreEmpty(t, pool, store.Table())
	rec.check(t, false)
}

// TestFaultDispatcherKilled kills (SIGKILL) a dispatcher process holding
// claimed rows: the database rolls its claim back as its connections
// close, and another bus on the same store delivers them at once, each
// once, none early.
func TestFaultDispatcherKilled(t *testing.T) {
	const n, lease = 200, 2 * time.Second
	pool := newPool(t, 10)
	schema := freshSchema(t, pool)
	store := newStore(t, pool, schema)
	endpoint := "pbe2e-kill-" + suffix()
	rec := newRecorder()
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build worker: %v\n%s", err, out)
	}
	// Schedule from a send-only bus (it never dispatches), and let every
	// row fall due before the worker starts, so its first claim takes them
	// all (one batch).
	sender := startBus(t, bus.Config{Endpoint: endpoint, Persistence: store, SendOnly: true}, nil)
	last := time.Now().Add(5 * time.Second) // scheduling takes far less, even on a loaded machine
	schedule(t, rec, []*bus.Bus{sender}, endpoint, "kill", n, last.Add(-500*time.Millisecond), 500*time.Millisecond)
	drivertest.Eventually(t, 10*time.Second, func() bool { return time.Now().After(last) }, "every row due")
	cmd := exec.Command(bin, "-schema", schema, "-endpoint", endpoint, "-lease", lease.String())
	cmd.Env = append(os.Environ(), "POSTBUS_TEST_POSTGRES_URL="+postgresURL())
	cmd.Stderr = t.Output()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		k, _ := stdout.Read(buf)
		line <- strings.TrimSpace(string(buf[:k]))
	}()
	select {
	case l := <-line:
		if l != "claimed" {
			t.Fatalf("worker said %q, want \"claimed\"", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker claimed nothing within 30s")
	}
	// The worker claims a whole batch before its first hand-over; wait
	// until the claim holds every row: a probe that locks what it can
	// (and rolls back) finds none free.
	drivertest.Eventually(t, 10*time.Second, func() bool {
		tx, err := pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var free int
		err = tx.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT id FROM `+store.Table()+` FOR UPDATE SKIP LOCKED) f`).Scan(&free)
		if err != nil {
			t.Fatal(err)
		}
		return free == 0
	}, "every row held by the worker")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killedAt := time.Now()

	startBus(t, bus.Config{Endpoint: endpoint, Persistence: store}, func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	})
	rec.waitAll(t, 30*time.Second)
	// The server rolled the claim back when the worker's connections
	// closed: the rows go out at the new bus's first claims, not after the
	// lease (2 s here, 30 s by default).
	took := time.Since(killedAt)
	t.Logf("worker killed holding %d rows; all delivered %v later", n, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the rows of the killed worker took %v to go out", took)
	}
	waitStoreEmpty(t, pool, store.Table())
	rec.check(t, true)
}

// rejecting wraps a transport and refuses the hand-over of one message ID
// to one queue, counting the refusals.
type rejecting struct {
	bus.Transport
	queue, id string
	refused   atomic.Int64
}

func (r *rejecting) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if queue == r.queue && env.ID == r.id {
		r.refused.Add(1)
		return errors.New("refused by fault injection")
	}
	return r.Transport.Send(ctx, queue, env)
}

// TestFaultRabbitMQRejectOne: a transport that refuses one due message
// (on RabbitMQ): it reaches the error queue after
// Dispatcher.NumberOfRetries failed hand-overs, with its ID, body and the
// dispatch failure headers, while every other message flows.
func TestFaultRabbitMQRejectOne(t *testing.T) {
	const n, retries = 50, 3
	k := rabbitKit(t)
	pool := newPool(t, 10)
	store := newStore(t, pool, freshSchema(t, pool))
	rec := newRecorder()
	bad := "reject-00007"
	tr := &rejecting{Transport: k.newTransport(t, ""), queue: k.endpoint, id: bad}
	cfg := k.config(tr, store)
	cfg.Dispatcher.NumberOfRetries = retries
	cfg.Dispatcher.RetryBackoff = 50 * time.Millisecond
	cfg.Dispatcher.MaximumRecoveryFailuresPerSecond = 1000
	b := startBus(t, cfg, func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	})
	// Read the error queue through a transport of its own.
	errs := make(chan *bus.Envelope, n)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		err := k.newTransport(t, "").Receive(ctx, k.errorQueue, bus.ReceiveOptions{Concurrency: 1},
			func(_ context.Context, env *bus.Envelope) error { errs <- env; return nil })
		if err != nil {
			t.Errorf("receive %s: %v", k.errorQueue, err)
		}
	})
	defer wg.Wait()
	defer cancel()

	schedule(t, rec, []*bus.Bus{b}, k.endpoint, "reject", n, time.Now().Add(3*time.Second), 500*time.Millisecond)
	var failed *bus.Envelope
	select {
	case failed = <-errs:
	case <-time.After(60 * time.Second):
		t.Fatal("nothing reached the error queue within 60s")
	}
	rec.mu.Lock()
	delete(rec.due, bad) // it never reaches a handler
	rec.mu.Unlock()
	rec.waitAll(t, 60*time.Second)
	waitStoreEmpty(t, pool, store.Table())
	if failed.ID != bad || failed.Type != bus.MessageName(Tick{}) || string(failed.Body) != `{"N":7}` {
		t.Errorf("error queue got %s %s %q, want %s with its body", failed.ID, failed.Type, failed.Body, bad)
	}
	if kind := failed.Header(bus.HeaderFailureKind); kind != "dispatch" {
		t.Errorf("failure kind %q, want dispatch", kind)
	}
	if got := tr.refused.Load(); got != retries+1 {
		t.Errorf("transport refused %d hand-overs, want %d (1 + %d retries)", got, retries+1, retries)
	}
	if m := b.Metrics(); m.DispatchFails != retries || m.MovedToError != 1 {
		t.Errorf("metrics %+v, want %d dispatch failures and 1 moved to the error queue", m, retries)
	}
	t.Logf("%s reached the error queue after %d refusals: %s", bad, tr.refused.Load(), failed.Header(bus.HeaderFailureReason))
	rec.check(t, true)
	select {
	case extra := <-errs:
		t.Errorf("unexpected message %s in the error queue", extra.ID)
	default:
	}
}

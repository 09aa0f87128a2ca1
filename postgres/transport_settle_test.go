package postgres_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// claimCounter is a pgx tracer counting the transport's claim statements
// (the only ones that lock with SKIP LOCKED in a WITH).
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "WITH c AS") && strings.Contains(d.SQL, "SKIP LOCKED") {
		c.n.Add(1)
	}
	return ctx
}

func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool opens a pool of the test's own with tracer on its
// connections, closed at cleanup; maxConns 0 keeps pgx's default size.
func tracedPool(t testing.TB, maxConns int32, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	testPool(t) // skips when the server is down
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// While every row a Receive holds was handled and waits for its
// acknowledgement, there is no room to claim more: Receive waits for an
// acknowledgement to end (or its poll) instead of claiming zero rows in a
// loop. Here the acknowledgements wait on row locks the test holds.
func TestTransportDoesNotSpinWhileAcknowledgementsArePending(t *testing.T) {
	t.Parallel()
	counter := &claimCounter{}
	pool := tracedPool(t, 0, counter)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{Lease: 30 * time.Second, PollInterval: 200 * time.Millisecond})
	queue := bustest.Namespace() + "-spin"
	ctx := ctxTimeout(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	// The test's locks: one transaction per message, opened by the handler.
	locker := testPool(t)
	var txs []pgx.Tx
	var handled atomic.Int64
	locked := make(chan pgx.Tx, 2)
	receiveAll(t, tr, queue, 1, func(ctx context.Context, env *bus.Envelope) error {
		tx, err := locker.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+tr.MessagesTable()+` WHERE queue = $1 AND message_id = $2 FOR UPDATE`, queue, env.ID); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		handled.Add(1)
		locked <- tx
		return nil
	})
	for _, id := range []string{"spin-1", "spin-2"} {
		if err := tr.Send(ctx, queue, envelopeTo(queue, id)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case tx := <-locked:
			txs = append(txs, tx)
		case <-ctx.Done():
			t.Fatal("the two messages were not handled")
		}
	}
	// Both rows are held (their acknowledgements wait on the locks), no
	// handler runs: count the claims over a second.
	time.Sleep(100 * time.Millisecond)
	before := counter.n.Load()
	time.Sleep(time.Second)
	claims := counter.n.Load() - before
	for _, tx := range txs {
		_ = tx.Rollback(context.Background())
	}
	// One claim per poll (200 ms), with room for a wake-up or two.
	if claims > 10 {
		t.Errorf("%d claims in a second while the rows held waited for their acknowledgements; want at most 10", claims)
	}
	waitFor(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+tr.MessagesTable()+` WHERE queue = $1`, queue).Scan(&n)
		return n == 0
	})
	if n := handled.Load(); n != 2 {
		t.Errorf("handled %d times, want 2", n)
	}
}

// An acknowledgement lost with its connection (the backend terminated, as
// a failover or an administrator does) is tried again on a new connection
// while the row is still this consumer's: the message is handled once, not
// again when its lease lapses. The pool never pings before handing out a
// connection, so the acknowledgement surely meets a dead one.
func TestTransportAcknowledgementLostWithItsBackendIsRetried(t *testing.T) {
	t.Parallel()
	testPool(t) // skips when the server is down
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	app := "postbus-test-" + bustest.Namespace()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const lease = 2 * time.Second
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{Lease: lease, PollInterval: 100 * time.Millisecond, DisableNotify: true})
	queue := bustest.Namespace() + "-ackcut"
	ctx := ctxTimeout(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	admin := testPool(t)
	var deliveries atomic.Int64
	receiveAll(t, tr, queue, 1, func(ctx context.Context, env *bus.Envelope) error {
		if deliveries.Add(1) > 1 {
			return nil
		}
		// Terminate every backend of the transport's pool, and wait until
		// they are gone, before the acknowledgement.
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
			t.Error(err)
		}
		for range 500 {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil || n == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	if err := tr.Send(ctx, queue, envelopeTo(queue, "ackcut-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return deliveries.Load() > 0 })
	// Three leases: time for a lost acknowledgement to bring it back.
	time.Sleep(3 * lease)
	if n := deliveries.Load(); n != 1 {
		t.Errorf("handled %d times, want once: the acknowledgement lost with its backend was not tried again", n)
	}
	var left int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+tr.MessagesTable()+` WHERE queue = $1`, queue).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left in the queue (%v), want 0", left, err)
	}
}

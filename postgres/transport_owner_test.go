package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// When the liveness connection of a living consumer is lost (here its
// backend is terminated), other consumers may take its rows at once: its
// deliveries are cancelled with ErrLeaseLost, and the message comes back
// within seconds, not after the 30 s lease.
func TestTransportLostOwnerLockCancelsDeliveries(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{Lease: postgres.DefaultLease})
	queue := bustest.Namespace() + "-owner"
	ctx := drivertest.Ctx(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	var calls, acked atomic.Int32
	redelivered := make(chan time.Time, 1)
	receiveAll(t, tr, queue, 1, func(ctx context.Context, _ *bus.Envelope) error {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return context.Cause(ctx)
		}
		redelivered <- time.Now()
		acked.Add(1)
		return nil
	})
	if err := tr.Send(ctx, queue, envelopeTo(queue, "owner-1")); err != nil {
		t.Fatal(err)
	}
	<-started
	var pid int32
	err := pool.QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN `+tr.MessagesTable()+` m
		ON m.lease_owner = (l.classid::bigint << 32) | l.objid::bigint
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND m.queue = $1`, queue).Scan(&pid)
	if err != nil {
		t.Fatalf("the claimed row's owner lock: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	terminated := time.Now()
	select {
	case err := <-cause:
		if !errors.Is(err, postgres.ErrLeaseLost) {
			t.Errorf("delivery ctx cause = %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery was not cancelled after its owner lock was lost")
	}
	select {
	case at := <-redelivered:
		if d := at.Sub(terminated); d > 5*time.Second {
			t.Errorf("redelivered %v after the lock was lost, want within seconds", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the message was not redelivered after the owner lock was lost")
	}
	waitFor(t, func() bool { return queueRows(t, ctx, pool, tr, queue) == 0 })
	time.Sleep(300 * time.Millisecond)
	if n := acked.Load(); n != 1 {
		t.Errorf("handled to completion %d times, want 1", n)
	}
}

// v030TransportDDL is the transport schema of v0.3.0, for the upgrade test.
func v030TransportDDL(schema, prefix string) []string {
	s := pgx.Identifier{schema}.Sanitize()
	m := pgx.Identifier{schema, prefix + "_messages"}.Sanitize()
	return []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE IF NOT EXISTS ` + m + ` (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue        text COLLATE "C" NOT NULL,
	message_id   text NOT NULL,
	message_type text NOT NULL,
	headers      jsonb,
	body         bytea NOT NULL,
	envelope     bytea NOT NULL,
	enqueued_at  timestamptz NOT NULL DEFAULT now(),
	available_at timestamptz NOT NULL DEFAULT now(),
	lease_token  bigint,
	deliveries   integer NOT NULL DEFAULT 0
)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{prefix + "_messages_claim_idx"}.Sanitize() + ` ON ` + m + ` (queue, available_at, seq)`,
		`CREATE TABLE IF NOT EXISTS ` + pgx.Identifier{schema, prefix + "_subscriptions"}.Sanitize() + ` (
	event_type text COLLATE "C" NOT NULL,
	queue      text COLLATE "C" NOT NULL,
	PRIMARY KEY (event_type, queue)
)`,
	}
}

// Provision upgrades the tables of v0.3.0 with messages in them: every
// message is delivered once, and one leased by a v0.3.0 consumer that died
// waits out its lease (it has no owner lock to tell that it died).
func TestTransportUpgradeFromV030(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := drivertest.Ctx(t, time.Minute)
	for _, ddl := range v030TransportDDL(schema, postgres.DefaultTablePrefix) {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	queue := bustest.Namespace() + "-upgrade"
	// A transport's sends write the v0.3.0 columns only.
	old := newTransport(t, pool, schema, postgres.TransportOptions{})
	ids := []string{"up-0", "up-1", "up-2", "up-leased", "up-overlap"}
	for _, id := range ids {
		if err := old.Send(ctx, queue, envelopeTo(queue, id)); err != nil {
			t.Fatal(err)
		}
	}
	var leaseEnd time.Time
	err := pool.QueryRow(ctx, `UPDATE `+old.MessagesTable()+` SET lease_token = 7, deliveries = 1,
		available_at = now() + interval '2 seconds' WHERE message_id = 'up-leased' RETURNING available_at`).Scan(&leaseEnd)
	if err != nil {
		t.Fatal(err)
	}

	tr := newTransport(t, pool, schema, postgres.TransportOptions{})
	for range 2 { // idempotent
		if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
			t.Fatal(err)
		}
	}
	// During the rolling upgrade: a v0.3.0 consumer claimed up-overlap
	// after the lease of a new consumer (owner key 5, which has died since)
	// lapsed; its claim left lease_owner as it was.
	var overlapEnd time.Time
	err = pool.QueryRow(ctx, `UPDATE `+old.MessagesTable()+` SET lease_token = 7, lease_owner = 5, deliveries = 2,
		available_at = now() + interval '2 seconds' WHERE message_id = 'up-overlap' RETURNING available_at`).Scan(&overlapEnd)
	if err != nil {
		t.Fatal(err)
	}
	var hasOwner bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'postbus_messages' AND column_name = 'lease_owner')`, schema).Scan(&hasOwner); err != nil || !hasOwner {
		t.Fatalf("lease_owner column after Provision: %v, %v", hasOwner, err)
	}
	got := newArrivals()
	receiveAll(t, tr, queue, 2, func(_ context.Context, env *bus.Envelope) error {
		got.add(env.ID)
		return nil
	})
	got.wait(t, len(ids), 30*time.Second)
	waitFor(t, func() bool { return queueRows(t, ctx, pool, tr, queue) == 0 })
	time.Sleep(500 * time.Millisecond) // a duplicate would show
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, id := range ids {
		if n := len(got.at[id]); n != 1 {
			t.Errorf("%s delivered %d times, want 1", id, n)
		}
	}
	for id, end := range map[string]time.Time{"up-leased": leaseEnd, "up-overlap": overlapEnd} {
		if at := got.at[id]; len(at) > 0 && at[0].Before(end.Add(-100*time.Millisecond)) {
			t.Errorf("%s, leased by a v0.3.0 consumer, was delivered %v before its lease ended", id, end.Sub(at[0]))
		}
	}
	ddl, err := postgres.TransportMigrations(postgres.TransportOptions{Schema: schema})
	if err != nil || !strings.Contains(strings.Join(ddl, "\n"), "ADD COLUMN lease_owner") {
		t.Errorf("TransportMigrations lacks the lease_owner upgrade: %v", err)
	}
}

// The reap reads the leased rows of one queue as a range of the claim
// index, and reads pg_locks only when another owner holds rows there: an
// idle or single-consumer queue costs one index probe a second.
func TestTransportReapPlan(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{})
	ctx := drivertest.Ctx(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: "q0"}); err != nil {
		t.Fatal(err)
	}
	m := tr.MessagesTable()
	for _, sql := range []string{
		`INSERT INTO ` + m + ` (queue, message_id, message_type, body, envelope)
		 SELECT 'q' || (i % 10), 'id-' || i, 'T', '\x', '\x' FROM generate_series(1, 20000) i`,
		// q1's rows are leased by an owner whose lock nobody holds.
		`UPDATE ` + m + ` SET available_at = now() + interval '30 seconds', lease_token = (seq << 32) | 5, lease_owner = 5
		 WHERE queue = 'q1' AND seq % 100 = 1`,
		`ANALYZE ` + m,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		idle := explain(t, pool, mode, postgres.ReapSQL(tr), "q2", int64(7))
		if !strings.Contains(idle, "_messages_claim_idx") || !strings.Contains(idle, "Function Scan on pg_lock_status l (never executed)") {
			t.Errorf("%s: the reap of a queue without leased rows:\n%s", mode, idle)
		}
		dead := explain(t, pool, mode, postgres.ReapSQL(tr)+" RETURNING m.seq", "q1", int64(7))
		if !strings.Contains(dead, "_messages_claim_idx") || !strings.Contains(dead, "LockRows (actual rows=200 loops=1)") {
			t.Errorf("%s: the reap of a queue with 200 rows of a vanished owner:\n%s", mode, dead)
		}
	}
}

// With DisableOwnerLock the claimed rows carry no owner (they rely on
// their lease alone), and a receiving transport holds no lock; without it
// they carry the key of a lock that is held.
func TestTransportDisableOwnerLock(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	for _, disable := range []bool{true, false} {
		tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{DisableOwnerLock: disable})
		queue := bustest.Namespace() + "-nolock"
		ctx := drivertest.Ctx(t, time.Minute)
		if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		stop := drivertest.Receive(t, tr, queue, bus.ReceiveOptions{Concurrency: 1}, func(ctx context.Context, _ *bus.Envelope) error {
			close(started)
			<-release
			return nil
		})
		if err := tr.Send(ctx, queue, envelopeTo(queue, "nolock-1")); err != nil {
			t.Fatal(err)
		}
		<-started
		var owner *int64
		var locked bool
		err := pool.QueryRow(ctx, `SELECT m.lease_owner, EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory'
			AND l.objsubid = 1 AND l.granted AND (l.classid::bigint << 32) | l.objid::bigint = m.lease_owner)
			FROM `+tr.MessagesTable()+` m WHERE m.queue = $1`, queue).Scan(&owner, &locked)
		if err != nil {
			t.Fatal(err)
		}
		if disable && owner != nil {
			t.Errorf("DisableOwnerLock: the claimed row has lease_owner %d, want NULL", *owner)
		}
		if !disable && (owner == nil || !locked) {
			t.Errorf("the claimed row's owner %v, its lock held: %v; want a held lock's key", owner, locked)
		}
		close(release)
		stop()
	}
}

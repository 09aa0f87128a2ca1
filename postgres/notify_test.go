package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// wakes collects the due times WatchDue reports.
type wakes struct {
	ch chan time.Time
}

func newWakes() *wakes { return &wakes{ch: make(chan time.Time, 100)} }

func (w *wakes) wake(due time.Time) { w.ch <- due }

func (w *wakes) next(t *testing.T, what string) time.Time {
	t.Helper()
	select {
	case d := <-w.ch:
		return d
	case <-time.After(15 * time.Second):
		t.Fatalf("no wake-up within 15s: %s", what)
		return time.Time{}
	}
}

// watch runs WatchDue until the test ends and checks it returned nil.
func watch(t *testing.T, p *postgres.Persistence, w *wakes) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.WatchDue(ctx, w.wake) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchDue returned %v after its context ended; want nil", err)
		}
	})
}

// waitListening polls pg_stat_activity until a session of application name
// app is listening, so a test stores only once the watcher can hear it.
func waitListening(t *testing.T, pool *pgxpool.Pool, app string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %' AND state = 'idle'`, app).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no LISTEN session of %s within 15s", app)
}

func appPool(t *testing.T, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err == nil {
		err = pool.Ping(t.Context())
	}
	if err != nil {
		serverUnavailable(t, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// listener returns a fresh schema and the wake-ups of a store on it that
// watches its channel on a pool of its own, once it is listening.
func listener(t *testing.T) (string, *wakes) {
	t.Helper()
	schema := freshSchema(t, testPool(t))
	app := "pbwatch_" + schema
	watcher := newStore(t, appPool(t, app), postgres.Options{Schema: schema})
	w := newWakes()
	watch(t, watcher, w)
	waitListening(t, testPool(t), app)
	return schema, w
}

func TestNotifyWakesAnotherInstance(t *testing.T) {
	t.Parallel()
	schema, w := listener(t)
	sender := newStore(t, newPool(t, 4), postgres.Options{Schema: schema, NotifyWithin: 2 * time.Hour})
	quiet := newStore(t, newPool(t, 4), postgres.Options{Schema: schema, DisableNotify: true})
	farOnly := newStore(t, newPool(t, 4), postgres.Options{Schema: schema}) // NotifyWithin 1 minute

	ctx := ctxTimeout(t, time.Minute)
	base := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	// Rows stored with notifications disabled wake nobody, nor do rows due
	// after NotifyWithin; the batch's earliest due time is the payload; a
	// batch of only known IDs is silent.
	store(t, quiet, ctx, "quiet", base.Add(-time.Minute))
	store(t, farOnly, ctx, "far", base.Add(-2*time.Minute))
	store(t, sender, ctx, "late", base.Add(time.Second))
	if err := sender.StoreOutgoing(ctx, []bus.OutgoingMessage{outgoing("a", base.Add(2*time.Second)), outgoing("b", base)}); err != nil {
		t.Fatal(err)
	}
	store(t, sender, ctx, "late", base.Add(time.Second)) // duplicate: no new row, no notification
	store(t, sender, ctx, "marker", base.Add(3*time.Second))
	for _, want := range []time.Time{base.Add(time.Second), base, base.Add(3 * time.Second)} {
		if got := w.next(t, "notification"); !got.Equal(want) {
			t.Fatalf("woken for %v, want %v", got, want)
		}
	}
	mustClear(t, sender, "quiet", "far", "late", "a", "b", "marker")
}

func TestWatchDueReconnectsAfterTheConnectionDies(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	app := "pbwatch_" + schema
	watcher := newStore(t, appPool(t, app), postgres.Options{Schema: schema})
	sender := newStore(t, testPool(t), postgres.Options{Schema: schema})
	w := newWakes()
	watch(t, watcher, w)
	waitListening(t, testPool(t), app)

	ctx := ctxTimeout(t, time.Minute)
	var killed int
	err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid)
		FROM pg_stat_activity WHERE application_name = $1) k`, app).Scan(&killed)
	if err != nil || killed == 0 {
		t.Fatalf("terminate the watcher's sessions: %d, %v", killed, err)
	}
	// On reconnecting, WatchDue wakes the dispatcher once, because it may
	// have missed notifications.
	if got := w.next(t, "resume after reconnect"); time.Since(got).Abs() > time.Minute {
		t.Errorf("resume wake-up for %v, want about now", got)
	}
	waitListening(t, testPool(t), app)
	due := time.Now().Add(time.Second).Truncate(time.Microsecond)
	store(t, sender, ctx, "after-reconnect", due)
	if got := w.next(t, "notification after reconnect"); !got.Equal(due) {
		t.Errorf("woken for %v, want %v", got, due)
	}
	mustClear(t, sender, "after-reconnect")
}

func TestWatchDueWithNotifyDisabledWaitsForContext(t *testing.T) {
	t.Parallel()
	p, err := postgres.New(lazyPool(t), postgres.Options{DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.WatchDue(ctx, func(time.Time) { t.Error("woken with notifications disabled") }) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchDue = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchDue did not return after its context ended")
	}
}

// TestDatabaseDownGivesWrappedErrors runs every method against a pool whose
// server does not exist: each returns a wrapped error (the dispatcher logs
// and retries), and WatchDue keeps retrying until its context ends.
func TestDatabaseDownGivesWrappedErrors(t *testing.T) {
	t.Parallel()
	p, err := postgres.New(lazyPool(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	_, _, nextErr := p.NextDueOutgoing(ctx, testTransport)
	_, claimErr := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Minute)
	_, cancelErr := p.CancelOutgoing(ctx, "x")
	// Settlements run in the transaction of the claim they name; a claim
	// this store did not make (none could be made) holds no row, and
	// settling it asks nothing of the database.
	if n, err := p.DeleteOutgoing(ctx, []bus.Claim{{ID: "x", Token: "t"}}); n != 0 || err != nil {
		t.Errorf("DeleteOutgoing of an unknown claim with the database down = %d, %v; want 0, nil", n, err)
	}
	if n, err := p.ReleaseOutgoing(ctx, []bus.Claim{{ID: "x", Token: "t"}}); n != 0 || err != nil {
		t.Errorf("ReleaseOutgoing of an unknown claim with the database down = %d, %v; want 0, nil", n, err)
	}
	if n, err := p.RecordOutgoingFailures(ctx, []bus.OutgoingFailure{{ID: "x", Token: "t", RetryAt: time.Now()}}); n != 0 || err != nil {
		t.Errorf("RecordOutgoingFailures of an unknown claim with the database down = %d, %v; want 0, nil", n, err)
	}
	_, nowErr := p.StoreNow(ctx)
	errs := map[string]error{
		"Setup":            p.Setup(ctx),
		"StoreOutgoing":    p.StoreOutgoing(ctx, []bus.OutgoingMessage{outgoing("x", time.Now())}),
		"ClaimDueOutgoing": claimErr,
		"NextDueOutgoing":  nextErr,
		"CancelOutgoing":   cancelErr,
		"StoreNow":         nowErr,
	}
	for name, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("%s with the database down = %v; want a wrapped error", name, err)
		}
	}
	wctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.WatchDue(wctx, func(time.Time) {}); err != nil {
		t.Errorf("WatchDue with the database down = %v; want nil once ctx ends", err)
	}
}

func TestConnectionsKilledMidRunLoseNothing(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	app := "pbkill_" + schema
	p := newStore(t, appPool(t, app), postgres.Options{Schema: schema})
	ctx := ctxTimeout(t, time.Minute)
	const n = 300
	due := time.Now().Add(-time.Second)
	msgs := make([]bus.OutgoingMessage, n)
	for i := range msgs {
		msgs[i] = outgoing(fmt.Sprintf("kill-%04d", i), due)
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var mu sync.Mutex
	failures := 0
	for round := 0; len(seen) < n && ctx.Err() == nil; round++ {
		if round%3 == 1 { // kill every session of the pool, as a database restart would
			_, _ = testPool(t).Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app)
		}
		// A claim whose reply is lost with its connection leases rows this
		// test never sees: a short lease hands them out again.
		got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 20, 3*time.Second)
		if err != nil {
			failures++
			continue
		}
		mu.Lock()
		for _, m := range got {
			seen[m.ID]++
		}
		mu.Unlock()
		for _, err := p.DeleteOutgoing(ctx, claims(got)); err != nil; _, err = p.DeleteOutgoing(ctx, claims(got)) {
			failures++
		}
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct rows, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("row %s claimed %d times", id, c)
		}
	}
	t.Logf("%d calls failed on killed connections and were retried", failures)
}

// testTransport is the transport identity of the rows these tests store.
const testTransport = "postgres-test"

func outgoing(id string, due time.Time) bus.OutgoingMessage {
	env := &bus.Envelope{ID: id, Type: "test", Kind: bus.KindCommand, Destination: "q", DueAt: due}
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: due, Transport: testTransport}
}

func store(t *testing.T, p *postgres.Persistence, ctx context.Context, id string, due time.Time) {
	t.Helper()
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{outgoing(id, due)}); err != nil {
		t.Fatalf("StoreOutgoing %s: %v", id, err)
	}
}

// mustClear cancels rows that are not leased and checks none is left.
func mustClear(t *testing.T, p *postgres.Persistence, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if ok, err := p.CancelOutgoing(t.Context(), id); err != nil || !ok {
			t.Fatalf("CancelOutgoing(%s) = %v, %v; want true, nil", id, ok, err)
		}
	}
	if _, ok, err := p.NextDueOutgoing(t.Context(), testTransport); ok || err != nil {
		t.Errorf("rows left behind: %v, %v", ok, err)
	}
}

func claims(msgs []bus.OutgoingMessage) []bus.Claim {
	out := make([]bus.Claim, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Claim()
	}
	return out
}

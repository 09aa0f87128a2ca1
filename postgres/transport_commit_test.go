package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// namedPool opens a pool of the test's own whose backends carry
// application_name app, so the test can find and terminate them. It never
// pings a connection before handing it out.
func namedPool(t *testing.T, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	testPool(t) // skips when the server is down
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// lockMessages holds a lock on tr's messages table that makes every INSERT
// wait, until the returned function (also run at cleanup) releases it.
func lockMessages(t *testing.T, tr *postgres.Transport) (release func()) {
	t.Helper()
	tx, err := testPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `LOCK TABLE `+tr.MessagesTable()+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	return release
}

// lockWaiters returns how many backends of app wait on a lock.
func lockWaiters(t *testing.T, app string) int {
	t.Helper()
	var n int
	err := testPool(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rowsOf returns how many rows each of ids has in tr's queue.
func rowsOf(t *testing.T, tr *postgres.Transport, queue string) map[string]int {
	t.Helper()
	rows, err := testPool(t).Query(t.Context(), `SELECT message_id, count(*) FROM `+tr.MessagesTable()+` WHERE queue = $1 GROUP BY 1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// provisioned returns a transport on pool in a fresh schema, with queue
// provisioned.
func provisioned(t *testing.T, pool *pgxpool.Pool, queue string, opts postgres.TransportOptions) *postgres.Transport {
	t.Helper()
	tr := newTransport(t, pool, freshSchema(t, testPool(t)), opts)
	if err := tr.Provision(t.Context(), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// Eight senders that each wait for their commit share commits: the rows
// they insert carry fewer distinct inserting transactions (xmin) than
// three quarters of the sends (with four commits in flight and eight rows
// always waiting, a commit holds two rows on average), and each commit
// wakes the queue's receivers once.
func TestTransportGroupCommitSharesCommits(t *testing.T) {
	t.Parallel()
	queue := bustest.Namespace() + "-group"
	tr := provisioned(t, newPool(t, 12), queue, postgres.TransportOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	listen, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	if _, err := listen.Exec(ctx, `LISTEN `+pgx.Identifier{postgres.NotifyChannel(tr)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	const senders, each = 8, 40
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := tr.Send(ctx, queue, envelopeTo(queue, fmt.Sprintf("g-%d-%d", s, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var rows, commits int
	err = testPool(t).QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM `+tr.MessagesTable()+` WHERE queue = $1`, queue).Scan(&rows, &commits)
	if err != nil {
		t.Fatal(err)
	}
	if rows != senders*each {
		t.Fatalf("%d rows, want %d", rows, senders*each)
	}
	t.Logf("%d sends in %d commits", rows, commits)
	if commits > rows*3/4 {
		t.Errorf("%d sends took %d commits, want at most %d: concurrent sends do not share commits", rows, commits, rows*3/4)
	}
	notified := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := listen.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		if n.Payload == queue {
			notified++
		}
	}
	if notified != commits {
		t.Errorf("%d notifications for %d commits, want one per commit", notified, commits)
	}
}

// A row the database refuses (here a header with a NUL character, which
// jsonb cannot hold) fails its own Send only: the sends grouped with it
// commit and return nil.
func TestTransportGroupCommitBadRowFailsOnlyItsCaller(t *testing.T) {
	t.Parallel()
	queue := bustest.Namespace() + "-badrow"
	tr := provisioned(t, newPool(t, 12), queue, postgres.TransportOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	const rounds, senders = 5, 24
	for r := range rounds {
		errs := make([]error, senders)
		var wg sync.WaitGroup
		for s := range senders {
			wg.Go(func() {
				env := envelopeTo(queue, fmt.Sprintf("r%d-s%d", r, s))
				if s == senders/2 {
					env.Headers = map[string]string{"bad": "a\x00b"}
				}
				errs[s] = tr.Send(ctx, queue, env)
			})
		}
		wg.Wait()
		for s, err := range errs {
			if bad := s == senders/2; bad != (err != nil) {
				t.Errorf("round %d, send %d (bad row: %t): %v", r, s, bad, err)
			}
		}
	}
	got := rowsOf(t, tr, queue)
	for r := range rounds {
		for s := range senders {
			want := 1
			if s == senders/2 {
				want = 0
			}
			if id := fmt.Sprintf("r%d-s%d", r, s); got[id] != want {
				t.Errorf("%s has %d rows, want %d", id, got[id], want)
			}
		}
	}
}

// sendResult is the outcome of one Send started by startSend.
type sendResult struct {
	id  string
	err error
}

func startSend(ctx context.Context, tr *postgres.Transport, queue, id string) <-chan sendResult {
	out := make(chan sendResult, 1)
	go func() { out <- sendResult{id, tr.Send(ctx, queue, envelopeTo(queue, id))} }()
	return out
}

func within(t *testing.T, what string, ch <-chan sendResult, d time.Duration) sendResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return sendResult{}
	}
}

// A caller whose context ends returns at once, even when its row is part
// of a commit that waits (here on a table lock) together with the rows of
// callers still waiting. Those commit once the lock is gone, and a
// cancelled caller's row is stored at most once.
func TestTransportGroupCommitCancelledCallerReturns(t *testing.T) {
	t.Parallel()
	app := "postbus-test-" + bustest.Namespace()
	queue := bustest.Namespace() + "-cancel"
	tr := provisioned(t, namedPool(t, app, 8), queue, postgres.TransportOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	release := lockMessages(t, tr)
	ctx1, cancel1 := context.WithCancel(ctx)
	a1 := startSend(ctx1, tr, queue, "a1")
	a2 := startSend(ctx, tr, queue, "a2")
	waitFor(t, func() bool { return lockWaiters(t, app) >= 1 })
	time.Sleep(100 * time.Millisecond) // a2 is in a commit or queued behind one
	a3 := startSend(ctx, tr, queue, "a3")
	ctxB, cancelB := context.WithCancel(ctx)
	b := startSend(ctxB, tr, queue, "b")
	time.Sleep(100 * time.Millisecond)
	cancel1()
	if r := within(t, "a1 after its cancellation", a1, 5*time.Second); !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled a1 returned %v, want context.Canceled", r.err)
	}
	time.Sleep(200 * time.Millisecond) // b is now in a commit with a3, or queued
	cancelB()
	if r := within(t, "b after its cancellation, while its commit waits", b, 5*time.Second); !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled b returned %v, want context.Canceled", r.err)
	}
	release()
	for _, ch := range []<-chan sendResult{a2, a3} {
		if r := within(t, "a send once the lock is gone", ch, 30*time.Second); r.err != nil {
			t.Errorf("%s: %v", r.id, r.err)
		}
	}
	got := rowsOf(t, tr, queue)
	if got["a2"] != 1 || got["a3"] != 1 || got["a1"] > 1 || got["b"] > 1 {
		t.Errorf("rows per message %v, want a2 and a3 once, a1 and b at most once", got)
	}
}

// When the backend that commits a group is terminated, every caller of
// that group gets an error and none of its rows is delivered; every
// caller that got nil has its message delivered, once.
func TestTransportGroupCommitTerminatedBackend(t *testing.T) {
	t.Parallel()
	app := "postbus-test-" + bustest.Namespace()
	queue := bustest.Namespace() + "-kill"
	tr := provisioned(t, namedPool(t, app, 8), queue, postgres.TransportOptions{PollInterval: 100 * time.Millisecond})
	ctx := ctxTimeout(t, 2*time.Minute)
	release := lockMessages(t, tr)
	const senders, each = 8, 5
	results := make(chan sendResult, senders*each)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("k-%d-%d", s, i)
				results <- sendResult{id, tr.Send(ctx, queue, envelopeTo(queue, id))}
			}
		})
	}
	for range 3 { // terminate the waiting committer three times
		waitFor(t, func() bool { return lockWaiters(t, app) >= 1 })
		if _, err := testPool(t).Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app); err != nil {
			t.Fatal(err)
		}
	}
	release()
	wg.Wait()
	close(results)
	ok := map[string]bool{}
	failed := 0
	for r := range results {
		if r.err == nil {
			ok[r.id] = true
		} else {
			failed++
		}
	}
	if failed == 0 || len(ok) == 0 {
		t.Fatalf("%d sends failed and %d succeeded; want some of each", failed, len(ok))
	}
	delivered := bustest.NewRecorder[string]()
	receiveAll(t, tr, queue, 4, func(ctx context.Context, env *bus.Envelope) error {
		return delivered.Handler(ctx, env.ID)
	})
	waitFor(t, func() bool { return delivered.Len() >= len(ok) })
	time.Sleep(500 * time.Millisecond) // room for a message that should not come
	seen := map[string]int{}
	for _, id := range delivered.Messages() {
		seen[id]++
	}
	for id := range ok {
		if seen[id] != 1 {
			t.Errorf("%s: Send returned nil, delivered %d times, want once", id, seen[id])
		}
	}
	for id, n := range seen {
		if !ok[id] {
			t.Errorf("%s: Send returned an error, yet delivered %d times", id, n)
		}
	}
}

// Close waits for the sends already accepted: when it returns nil, their
// rows are committed. Sends after Close fail with ErrTransportClosed.
func TestTransportCloseWaitsForPendingSends(t *testing.T) {
	t.Parallel()
	app := "postbus-test-" + bustest.Namespace()
	queue := bustest.Namespace() + "-close"
	tr := provisioned(t, namedPool(t, app, 8), queue, postgres.TransportOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	release := lockMessages(t, tr)
	const n = 8
	sends := make([]<-chan sendResult, n)
	for i := range n {
		sends[i] = startSend(ctx, tr, queue, fmt.Sprintf("c%d", i))
	}
	// Every send is accepted before Close: one per commit in flight, each
	// waiting for the lock, and the others queued behind them.
	waitFor(t, func() bool {
		return lockWaiters(t, app) >= postgres.MaxCommitsInFlight && postgres.QueuedSends(tr) == n-postgres.MaxCommitsInFlight
	})
	closed := make(chan error, 1)
	go func() { closed <- tr.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while sends were waiting for their commit", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s of the lock's release")
	}
	if got := rowsOf(t, tr, queue); len(got) != n {
		t.Errorf("when Close returned, %d of %d pending sends were committed: %v", len(got), n, got)
	}
	for _, ch := range sends {
		if r := within(t, "a pending send", ch, 10*time.Second); r.err != nil {
			t.Errorf("%s: %v", r.id, r.err)
		}
	}
	if err := tr.Send(ctx, queue, envelopeTo(queue, "late")); !errors.Is(err, postgres.ErrTransportClosed) {
		t.Errorf("Send after Close = %v, want ErrTransportClosed", err)
	}
}

// Close whose context ends gives up on the sends still waiting: they fail,
// and none of their rows is stored.
func TestTransportCloseGivesUpWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	app := "postbus-test-" + bustest.Namespace()
	queue := bustest.Namespace() + "-closectx"
	tr := provisioned(t, namedPool(t, app, 8), queue, postgres.TransportOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	release := lockMessages(t, tr)
	const n = 4
	sends := make([]<-chan sendResult, n)
	for i := range n {
		sends[i] = startSend(ctx, tr, queue, fmt.Sprintf("x%d", i))
	}
	waitFor(t, func() bool { return lockWaiters(t, app) >= 1 })
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := tr.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a context that ends = %v, want context.DeadlineExceeded", err)
	}
	for _, ch := range sends {
		if r := within(t, "a send Close gave up on", ch, 10*time.Second); r.err == nil {
			t.Errorf("%s returned nil although its commit was abandoned", r.id)
		}
	}
	release()
	if got := rowsOf(t, tr, queue); len(got) != 0 {
		t.Errorf("rows stored for sends that failed: %v", got)
	}
}

package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mysql"
)

// failoverRows is how many rows the claim failover tests schedule.
const failoverRows = 20

// A process holding claimed rows is SIGKILLed while it hands them over:
// the server rolls its claim back when the connection drops, and a bus in
// this process hands every row over within 2 s of the kill, each once,
// none before its due time (with leases written in the rows it waited out
// the 30 s lease).
func TestClaimFailoverAfterKill(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	table, p := failoverTable(t, db)
	holder, lines := startHolder(t, table, "block")
	due := time.Now().Add(time.Second)
	storeTicks(t, ctx, p, "kill", due)
	waitLine(t, lines, "sending")
	waitHeld(t, ctx, db, p.Table())
	rec := startTakeover(t, db, table)
	kill := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	rec.wait(t, failoverRows, 45*time.Second)
	last := rec.check(t, due)
	if after := last.Sub(kill); after > 2*time.Second {
		t.Errorf("the last row was handed over %v after the kill, want within 2 s", after.Round(time.Millisecond))
	} else {
		t.Logf("every row handed over within %v of the kill", after.Round(time.Millisecond))
	}
	time.Sleep(500 * time.Millisecond) // room for a duplicate to show
	rec.check(t, due)
}

// A process holding rows claimed ahead (3 s lease, 1 s window) is
// SIGSTOPped: the server ends its idle claim after the window and the
// lease, a bus in this process hands every row over within that and a
// margin, and once the frozen process runs again it sends none of them.
func TestClaimFailoverAfterFreeze(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	table, p := failoverTable(t, db)
	holder, _ := startHolder(t, table, "freeze")
	due := time.Now().Add(3 * time.Second)
	storeTicks(t, ctx, p, "freeze", due)
	waitHeld(t, ctx, db, p.Table())
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if stopped.After(due) {
		t.Fatalf("the holder was stopped %v after the rows fell due: too late to hold them", stopped.Sub(due))
	}
	rec := startTakeover(t, db, table)
	const window, lease, margin = time.Second, 3 * time.Second, 6 * time.Second
	rec.wait(t, failoverRows, window+lease+margin)
	last := rec.check(t, due)
	t.Logf("every row handed over %v after the holder was stopped", last.Sub(stopped).Round(time.Millisecond))
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the holder wakes, finds its claim ended
	_ = holder.Process.Signal(syscall.SIGTERM)
	_ = holder.Wait()
	rec.check(t, due)
	var sent int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"_sends`").Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if sent != 0 {
		t.Errorf("the frozen holder sent %d rows after it woke, want none", sent)
	}
}

// failoverTable makes the tables of a failover test, and table_sends, where
// a holder records its sends.
func failoverTable(t *testing.T, db *sql.DB) (string, *mysql.Persistence) {
	t.Helper()
	p := newStore(t, db, mysql.Options{})
	table := p.Table()[1 : len(p.Table())-1]
	sends := "`" + table + "_sends`"
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE "+sends+" (msg_id VARCHAR(64) NOT NULL, sent_us BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+sends) })
	return table, p
}

// startHolder starts this test binary as a holder (claim_holder_test.go)
// and waits for it to print "ready".
func startHolder(t *testing.T, table, mode string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+table+"|"+mode)
	cmd.Stderr = os.Stderr
	return cmd, drivertest.StartWorker(t, cmd)
}

func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	select {
	case line := <-lines:
		if line != want {
			t.Fatalf("holder printed %q, want %q", line, want)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("holder never printed %q", want)
	}
}

// storeTicks stores failoverRows ticks due at due, through the
// holder's transport.
func storeTicks(t *testing.T, ctx context.Context, p *mysql.Persistence, prefix string, due time.Time) {
	t.Helper()
	msgs := make([]bus.OutgoingMessage, failoverRows)
	for i := range msgs {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		env := &bus.Envelope{ID: id, Type: tickType, Kind: bus.KindCommand, Body: fmt.Appendf(nil, `{"N":%d}`, i),
			ContentType: "application/json", Source: "failover-test", Destination: workerEndpoint, SentAt: time.Now().UTC(), DueAt: due}
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: tickType, Envelope: bus.MarshalEnvelope(env), DueAt: due,
			Transport: workerTransport}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
}

// waitHeld waits until another process holds every row of table: each is
// locked (a SKIP LOCKED probe skips it) or, as an earlier version did it,
// leased.
func waitHeld(t *testing.T, ctx context.Context, db *sql.DB, table string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var total, free int
		err := func() error {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			return tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM "+table+"), (SELECT COUNT(*) FROM (SELECT id FROM "+table+
				" WHERE lease_token IS NULL OR lease_until <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED) AS f)").Scan(&total, &free)
		}()
		if err != nil {
			t.Fatal(err)
		}
		if total == failoverRows && free == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute %d of %d rows are free, want all held", free, total)
		}
	}
}

// takeover records what a bus of this process hands over.
type takeover struct {
	mu sync.Mutex
	at map[string][]time.Time
}

// startTakeover starts a bus on table with the holder's transport
// identity, whose handler records each message it receives.
func startTakeover(t *testing.T, db *sql.DB, table string) *takeover {
	t.Helper()
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	rec := &takeover{at: map[string][]time.Time{}}
	bustest.StartBus(t, bus.Config{Endpoint: workerEndpoint, Transport: newSyncTransport(), Persistence: p, SkipSetup: true},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(ctx context.Context, _ tick) error {
				now := time.Now()
				rec.mu.Lock()
				defer rec.mu.Unlock()
				id := bus.IncomingMessage(ctx).ID
				rec.at[id] = append(rec.at[id], now)
				return nil
			})
		})
	return rec
}

// wait waits until n distinct messages arrived, for up to limit.
func (r *takeover) wait(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		got := len(r.at)
		r.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v %d of %d messages arrived", limit, got, n)
		}
	}
}

// check fails the test unless each message arrived once, none before due,
// and returns when the last one arrived.
func (r *takeover) check(t *testing.T, due time.Time) time.Time {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for id, at := range r.at {
		if len(at) != 1 {
			t.Errorf("message %s arrived %d times, want once", id, len(at))
		}
		for _, a := range at {
			if a.Before(due) {
				t.Errorf("message %s arrived %v before it was due", id, due.Sub(a))
			}
			if a.After(last) {
				last = a
			}
		}
	}
	if len(r.at) != failoverRows {
		t.Errorf("%d distinct messages arrived, want %d", len(r.at), failoverRows)
	}
	return last
}

package postgres_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// TestMultiProcess runs three OS processes, each
// a bus with its own pool and its own in-memory transport, dispatch 20,000
// messages due within the same second from one table; every handler records
// each receipt in a table without a unique key, so duplicates would show.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := filepath.Join(t.TempDir(), "multiproc")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./internal/multiproc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("EachMessageOnce", func(t *testing.T) {
		t.Parallel()
		multiProcess(t, pool, bin, false)
	})
	t.Run("OneProcessKilled", func(t *testing.T) {
		t.Parallel()
		multiProcess(t, pool, bin, true)
	})
}

const multiN = 20000

func multiProcess(t *testing.T, pool *pgxpool.Pool, bin string, kill bool) {
	ctx := ctxTimeout(t, 5*time.Minute)
	p := newStore(t, pool, postgres.Options{})
	schema := strings.Trim(strings.Split(p.Table(), ".")[0], `"`)
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	claims := pgx.Identifier{schema, "claims"}.Sanitize()
	for _, ddl := range []string{
		`CREATE TABLE ` + receipts + ` (msg_id text NOT NULL, n int NOT NULL, proc text NOT NULL,
			due_at timestamptz NOT NULL, received_at timestamptz NOT NULL)`,
		`CREATE TABLE ` + claims + ` (msg_id text NOT NULL, proc text NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	procs := map[string]*exec.Cmd{}
	var hung <-chan string
	logs := new(bustest.LogBuffer) // every worker's log, also on os.Stderr
	for _, name := range []string{"p1", "p2", "p3"} {
		args := []string{"run", "-schema", schema, "-name", name, "-lease", "3s"}
		if kill && name == "p2" {
			// p2 blocks its handler after 300 messages, mid-batch: the
			// SIGKILL below then always lands with claimed rows unsettled.
			args = append(args, "-hang-after", "300")
		}
		var lines <-chan string
		procs[name], lines = startWorkerLogging(t, bin, logs, args...)
		if name == "p2" {
			hung = lines
		}
	}
	// Due within one second, starting on the second after next. The rows
	// are stored in one call, as the bus would store them, so the start
	// does not depend on how fast this machine schedules.
	at := time.Now().Truncate(time.Second).Add(2 * time.Second)
	msgs := make([]bus.OutgoingMessage, multiN)
	for i := range msgs {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i)
		due := at.Add(time.Duration(i) * time.Second / multiN)
		env := &bus.Envelope{ID: id, Type: "multiproc.Tick", Kind: bus.KindCommand,
			Body: fmt.Appendf(nil, `{"N":%d}`, i), ContentType: "application/json",
			Source: "multiproc-test", Destination: "multiproc", SentAt: time.Now().UTC(), DueAt: due}
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: due,
			Transport: "multiproc-sync"} // the workers' transport identity
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(at); late > 0 {
		t.Logf("storing took until %v after the first due time", late.Round(time.Millisecond))
	}

	var victim string
	if kill {
		victim = "p2"
		select {
		case line := <-hung:
			if line != "hung" {
				t.Fatalf("p2 printed %q, want hung", line)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("p2 never reached its hang point")
		}
		if err := procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = procs[victim].Wait()
		delete(procs, victim)
		t.Logf("killed %s mid-dispatch", victim)
	}
	// Wait until the table is empty and every message was received.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var left, distinct int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+p.Table()+`), (SELECT count(DISTINCT msg_id) FROM `+receipts+`)`).Scan(&left, &distinct)
		if err != nil {
			// The server is shared: another suite may restart it. Poll on.
			t.Logf("polling: %v", err)
		} else if left == 0 && distinct == multiN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes: %d rows left, %d of %d messages received", left, distinct, multiN)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	checkReceipts(t, ctx, pool, receipts, claims, at, victim, strings.Contains(logs.String(), abandonedSettle))
}

// abandonedSettle is what a worker's dispatcher logs when the store failed
// every attempt to delete rows it had handed over until their lease was
// about to end: those rows are handed over again after the lease, a
// duplicate the store's fault explains (on a shared server, another suite
// can exhaust its connections).
const abandonedSettle = "cannot settle dispatched rows; they will be dispatched again after their lease"

func checkReceipts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, receipts, claims string, at time.Time, victim string, storeFault bool) {
	var total, distinct, early int
	var last time.Time
	err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id), count(*) FILTER (WHERE received_at < due_at), max(received_at) FROM `+receipts).
		Scan(&total, &distinct, &early, &last)
	if err != nil {
		t.Fatal(err)
	}
	byProc, err := pgx.CollectRows(must(pool.Query(ctx, `SELECT proc || '=' || count(*) FROM `+receipts+` GROUP BY proc ORDER BY proc`)), pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d receipts of %d messages (%s), %d early; last received %v after the first due time",
		total, distinct, strings.Join(byProc, " "), early, last.Sub(at).Round(time.Millisecond))
	if distinct != multiN {
		t.Errorf("%d distinct messages received, want %d", distinct, multiN)
	}
	if early != 0 {
		t.Errorf("%d messages received before their due time", early)
	}
	if victim == "" {
		if total != multiN && !storeFault {
			t.Errorf("%d receipts, want exactly %d: duplicates without any failure", total, multiN)
		}
		if storeFault {
			// Duplicates only of rows whose delete the store refused, and
			// each sent once more at most.
			var most int
			if err := pool.QueryRow(ctx, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM `+receipts+` GROUP BY msg_id) c`).Scan(&most); err != nil {
				t.Fatal(err)
			}
			t.Logf("a worker could not settle rows it handed over (the store refused): %d duplicates", total-multiN)
			if most > 2 {
				t.Errorf("a message was received %d times; a refused delete explains one more at most", most)
			}
		}
		return
	}
	// Duplicates are allowed only for rows the killed process had claimed,
	// and then only once by the survivors.
	var dups, bad, takenOver int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE total > 1),
		count(*) FILTER (WHERE total > 1 AND (survivors > 1 OR NOT claimed_by_victim)),
		count(*) FILTER (WHERE total = survivors AND claimed_by_victim)
		FROM (
		SELECT r.msg_id, count(*) AS total,
		       count(*) FILTER (WHERE r.proc <> $1) AS survivors,
		       EXISTS (SELECT 1 FROM `+claims+` c WHERE c.msg_id = r.msg_id AND c.proc = $1) AS claimed_by_victim
		FROM `+receipts+` r GROUP BY r.msg_id) d`, victim).Scan(&dups, &bad, &takenOver)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows claimed by %s were dispatched by the survivors after its lease lapsed; "+
		"%d messages were received twice, %d of them outside the rows %s had claimed", takenOver+dups, victim, dups, bad, victim)
	if bad != 0 {
		t.Errorf("%d duplicated messages were not claimed by the killed process, or were received twice by survivors", bad)
	}
	if takenOver+dups == 0 {
		t.Errorf("%s held no claimed rows when it was killed: the kill was not mid-dispatch", victim)
	}
}

// startWorker starts bin with the test database's URL and waits for it to
// print "ready" (drivertest.StartWorker).
func startWorker(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	return startWorkerLogging(t, bin, nil, args...)
}

// startWorkerLogging is startWorker with the worker's log also written to
// logs, when not nil.
func startWorkerLogging(t *testing.T, bin string, logs io.Writer, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "POSTBUS_TEST_POSTGRES_URL="+testURL())
	cmd.Stderr = os.Stderr
	if logs != nil {
		cmd.Stderr = io.MultiWriter(os.Stderr, logs)
	}
	return cmd, drivertest.StartWorker(t, cmd)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

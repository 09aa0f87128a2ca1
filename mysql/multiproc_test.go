package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mysql"
)

// multiN is how many messages TestMultiProcess schedules, due within one
// second.
const multiN = 5000

// TestMultiProcess runs three OS processes (this test binary,
// re-executed), each a bus with its own *sql.DB and its own transport,
// that dispatch multiN messages due within the same second from one
// table; every handler records each receipt in a table without a unique
// key, so duplicates would show. In OneProcessKilled one process is
// SIGKILLed mid-dispatch: the survivors send its claimed rows after the
// lease lapses, and only those may arrive twice.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	db := testDB(t)
	t.Run("EachMessageOnce", func(t *testing.T) {
		t.Parallel()
		multiProcess(t, db, false)
	})
	t.Run("OneProcessKilled", func(t *testing.T) {
		t.Parallel()
		multiProcess(t, db, true)
	})
}

func multiProcess(t *testing.T, db *sql.DB, kill bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	table := freshTable()
	p := newStore(t, db, mysql.Options{Table: table})
	receipts, claims := "`"+table+"_receipts`", "`"+table+"_claims`"
	// MEMORY tables: a receipt costs no redo log flush, so the handlers
	// measure the store rather than the disk.
	for _, ddl := range []string{
		"CREATE TABLE " + receipts + " (msg_id VARCHAR(64) NOT NULL, proc VARCHAR(8) NOT NULL, due_us BIGINT NOT NULL, received_us BIGINT NOT NULL) ENGINE=MEMORY",
		"CREATE TABLE " + claims + " (msg_id VARCHAR(64) NOT NULL, proc VARCHAR(8) NOT NULL) ENGINE=MEMORY",
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+receipts+", "+claims)
	})
	procs := map[string]*exec.Cmd{}
	var hung <-chan string
	start := func(names ...string) {
		for _, name := range names {
			hangAfter := 0
			if kill && name == "p2" {
				hangAfter = 50 // p2 blocks mid-batch: the SIGKILL lands with claimed rows unsettled
			}
			var lines <-chan string
			procs[name], lines = startWorker(t, fmt.Sprintf("%s|%s|%d", table, name, hangAfter))
			if name == "p2" {
				hung = lines
			}
		}
	}
	// With a kill, p2 starts alone and the others once it hangs: started
	// together, the other two could claim every row before p2 handled 50.
	if kill {
		start("p2")
	} else {
		start("p1", "p2", "p3")
	}
	// Due within one second, starting on the second after next, stored in
	// one call as the bus would store them.
	at := time.Now().Truncate(time.Second).Add(2 * time.Second)
	msgs := make([]bus.OutgoingMessage, multiN)
	for i := range msgs {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i)
		due := at.Add(time.Duration(i) * time.Second / multiN)
		env := &bus.Envelope{ID: id, Type: tickType, Kind: bus.KindCommand, Body: fmt.Appendf(nil, `{"N":%d}`, i),
			ContentType: "application/json", Source: "multiproc-test", Destination: workerEndpoint, SentAt: time.Now().UTC(), DueAt: due}
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: tickType, Envelope: bus.MarshalEnvelope(env), DueAt: due,
			Transport: workerTransport}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(at); late > 0 {
		t.Logf("storing took until %v after the first due time", late.Round(time.Millisecond))
	}
	victim := ""
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
		start("p1", "p3")
		if err := procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = procs[victim].Wait()
		delete(procs, victim)
		t.Logf("killed %s mid-dispatch", victim)
	}
	deadline := time.Now().Add(6 * time.Minute)
	for {
		var left, distinct int
		err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM "+p.Table()+"), (SELECT COUNT(DISTINCT msg_id) FROM "+receipts+")").Scan(&left, &distinct)
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 && distinct == multiN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 6 minutes: %d rows left, %d of %d messages received", left, distinct, multiN)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	checkReceipts(t, ctx, db, receipts, claims, at, victim)
}

func checkReceipts(t *testing.T, ctx context.Context, db *sql.DB, receipts, claims string, at time.Time, victim string) {
	var total, distinct, early int
	var last int64
	err := db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT msg_id), COALESCE(SUM(received_us < due_us), 0), COALESCE(MAX(received_us), 0) FROM "+receipts).
		Scan(&total, &distinct, &early, &last)
	if err != nil {
		t.Fatal(err)
	}
	var byProc string
	if err := db.QueryRowContext(ctx, "SELECT GROUP_CONCAT(x ORDER BY x SEPARATOR ' ') FROM (SELECT CONCAT(proc, '=', COUNT(*)) AS x FROM "+receipts+" GROUP BY proc) AS s").Scan(&byProc); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d receipts of %d messages (%s), %d early; last received %v after the first due time",
		total, distinct, byProc, early, time.UnixMicro(last).Sub(at).Round(time.Millisecond))
	if distinct != multiN {
		t.Errorf("%d distinct messages received, want %d", distinct, multiN)
	}
	if early != 0 {
		t.Errorf("%d messages received before their due time", early)
	}
	if victim == "" {
		if total != multiN {
			t.Errorf("%d receipts, want exactly %d: duplicates without any failure", total, multiN)
		}
		return
	}
	// Duplicates are allowed only for rows the killed process had claimed,
	// and then only once by the survivors.
	var dups, bad, takenOver int
	err = db.QueryRowContext(ctx, `SELECT COALESCE(SUM(total > 1), 0),
		COALESCE(SUM(total > 1 AND (survivors > 1 OR NOT claimed_by_victim)), 0),
		COALESCE(SUM(total = survivors AND claimed_by_victim), 0)
		FROM (SELECT r.msg_id, COUNT(*) AS total, SUM(r.proc <> ?) AS survivors,
		      EXISTS (SELECT 1 FROM `+claims+` c WHERE c.msg_id = r.msg_id AND c.proc = ?) AS claimed_by_victim
		      FROM `+receipts+` r GROUP BY r.msg_id) AS d`, victim, victim).Scan(&dups, &bad, &takenOver)
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

// startWorker starts this test binary as a worker of TestMultiProcess
// and waits for it to print "ready" (drivertest.StartWorker).
func startWorker(t *testing.T, spec string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+spec)
	cmd.Stderr = os.Stderr
	return cmd, drivertest.StartWorker(t, cmd)
}

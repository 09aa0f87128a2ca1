package postgres_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// TestMultiProcess runs three OS processes (./internal/multiproc), each a
// bus with its own pool, that dispatch 20,000 messages due within the same
// second from one table (storetest.RunMultiProcess). In OneProcessKilled
// one process is SIGKILLed mid-dispatch.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := buildWorker(t, "multiproc")
	// p2 hangs after 300 messages, mid-batch: the SIGKILL then always
	// lands with claimed rows unsettled.
	mp := storetest.MultiProcess{N: 20000, Lease: 3 * time.Second, HangAfter: 300, Within: 3 * time.Minute}
	t.Run("EachMessageOnce", func(t *testing.T) {
		t.Parallel()
		storetest.RunMultiProcess(t, workers(t, pool, bin), mp, false)
	})
	t.Run("OneProcessKilled", func(t *testing.T) {
		t.Parallel()
		storetest.RunMultiProcess(t, workers(t, pool, bin), mp, true)
	})
}

// buildWorker builds the worker program ./internal/name.
func buildWorker(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./internal/"+name)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// workers makes a fresh store with the receipts and claims tables of the
// worker bin (./internal/multiproc).
func workers(t *testing.T, pool *pgxpool.Pool, bin string) storetest.Workers {
	t.Helper()
	p := newStore(t, pool, postgres.Options{})
	schema := strings.Trim(strings.Split(p.Table(), ".")[0], `"`)
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	claims := pgx.Identifier{schema, "claims"}.Sanitize()
	for _, ddl := range []string{
		`CREATE TABLE ` + receipts + ` (msg_id text NOT NULL, n int NOT NULL, proc text NOT NULL,
			due_at timestamptz NOT NULL, received_at timestamptz NOT NULL)`,
		`CREATE TABLE ` + claims + ` (msg_id text NOT NULL, proc text NOT NULL)`,
	} {
		if _, err := pool.Exec(t.Context(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	return storetest.Workers{Store: p, Space: schema,
		Command: func(spec storetest.WorkerSpec) *exec.Cmd { return workerCommand(bin, spec.Args()...) },
		Progress: func(ctx context.Context) (left, received int, err error) {
			err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+p.Table()+`), (SELECT count(DISTINCT msg_id) FROM `+receipts+`)`).Scan(&left, &received)
			return left, received, err
		},
		Receipts: func(ctx context.Context) ([]storetest.Receipt, error) {
			rows, _ := pool.Query(ctx, `SELECT msg_id, n, proc, due_at, received_at FROM `+receipts)
			return pgx.CollectRows(rows, pgx.RowToStructByPos[storetest.Receipt])
		},
		Claims: func(ctx context.Context) ([]storetest.Claim, error) {
			rows, _ := pool.Query(ctx, `SELECT msg_id, proc FROM `+claims)
			return pgx.CollectRows(rows, pgx.RowToStructByPos[storetest.Claim])
		},
	}
}

// workerCommand is the worker program bin with args, on the test database.
func workerCommand(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "POSTBUS_TEST_POSTGRES_URL="+testURL())
	return cmd
}

// startWorker starts the worker program bin with args and waits for it to
// print "ready" (drivertest.StartWorker).
func startWorker(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := workerCommand(bin, args...)
	cmd.Stderr = os.Stderr
	return cmd, drivertest.StartWorker(t, cmd)
}

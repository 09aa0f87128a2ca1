package mysql_test

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

// TestMultiProcess runs three OS processes (this test binary,
// re-executed), each a bus with its own *sql.DB, that dispatch 5,000
// messages due within the same second from one table
// (storetest.RunMultiProcess). In OneProcessKilled one process is
// SIGKILLed mid-dispatch.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	db := testDB(t)
	mp := storetest.MultiProcess{N: 5000, Lease: 3 * time.Second, HangAfter: 50, VictimFirst: true, Within: 6 * time.Minute}
	t.Run("EachMessageOnce", func(t *testing.T) {
		t.Parallel()
		storetest.RunMultiProcess(t, workers(t, db), mp, false)
	})
	t.Run("OneProcessKilled", func(t *testing.T) {
		t.Parallel()
		storetest.RunMultiProcess(t, workers(t, db), mp, true)
	})
}

// workers makes a fresh store with the workers' receipts and claims
// tables: MEMORY tables, so a receipt costs no redo log flush and the
// handlers measure the store rather than the disk.
func workers(t *testing.T, db *sql.DB) storetest.Workers {
	t.Helper()
	p := newStore(t, db, mysql.Options{})
	table := strings.Trim(p.Table(), "`")
	receipts, claims := "`"+table+"_receipts`", "`"+table+"_claims`"
	for _, ddl := range []string{
		"CREATE TABLE " + receipts + " (msg_id VARCHAR(64) NOT NULL, n INT NOT NULL, proc VARCHAR(8) NOT NULL, due_us BIGINT NOT NULL, received_us BIGINT NOT NULL) ENGINE=MEMORY",
		"CREATE TABLE " + claims + " (msg_id VARCHAR(64) NOT NULL, proc VARCHAR(8) NOT NULL) ENGINE=MEMORY",
	} {
		if _, err := db.ExecContext(t.Context(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+receipts+", "+claims) })
	return storetest.Workers{Store: p, Space: table, Command: storetest.Reexec,
		Progress: func(ctx context.Context) (left, received int, err error) {
			err = db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM "+p.Table()+"), (SELECT COUNT(DISTINCT msg_id) FROM "+receipts+")").Scan(&left, &received)
			return left, received, err
		},
		Receipts: func(ctx context.Context) ([]storetest.Receipt, error) {
			return collect(ctx, db, "SELECT msg_id, n, proc, due_us, received_us FROM "+receipts, func(rows *sql.Rows) (r storetest.Receipt, err error) {
				var due, received int64
				err = rows.Scan(&r.ID, &r.N, &r.Proc, &due, &received)
				r.Due, r.Received = time.UnixMicro(due), time.UnixMicro(received)
				return r, err
			})
		},
		Claims: func(ctx context.Context) ([]storetest.Claim, error) {
			return collect(ctx, db, "SELECT msg_id, proc FROM "+claims, func(rows *sql.Rows) (c storetest.Claim, err error) {
				return c, rows.Scan(&c.ID, &c.Proc)
			})
		},
	}
}

// collect reads every row of query with scan.
func collect[T any](ctx context.Context, db *sql.DB, query string, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// openWorker opens the store of a worker process: this test binary,
// re-executed (storetest.WorkerIfAsked in TestMain).
func openWorker(ctx context.Context, spec storetest.WorkerSpec, _ *slog.Logger) (storetest.WorkerStore, error) {
	db, err := openDB(ctx, testDSN(), 8)
	if err != nil {
		return storetest.WorkerStore{}, err
	}
	p, err := mysql.New(db, mysql.Options{Table: spec.Space})
	if err != nil {
		_ = db.Close()
		return storetest.WorkerStore{}, err
	}
	logClaims := func(ctx context.Context, ids []string) error {
		args := make([]any, 0, 2*len(ids))
		for _, id := range ids {
			args = append(args, id, spec.Name)
		}
		_, err := db.ExecContext(ctx, "INSERT INTO `"+spec.Space+"_claims` (msg_id, proc) VALUES "+
			strings.Repeat("(?, ?), ", len(ids)-1)+"(?, ?)", args...)
		return err
	}
	return storetest.WorkerStore{Persistence: &claimLog{Persistence: p, log: logClaims},
		Record: func(ctx context.Context, r storetest.Receipt) error {
			_, err := db.ExecContext(ctx, "INSERT INTO `"+spec.Space+"_receipts` (msg_id, n, proc, due_us, received_us) VALUES (?, ?, ?, ?, "+
				"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', UTC_TIMESTAMP(6)))", r.ID, r.N, r.Proc, r.Due.UnixMicro())
			return err
		},
		Close: func() { _ = db.Close() },
	}, nil
}

// claimLog logs a worker's claims (storetest.ClaimLogger). Embedding keeps
// Setup and WatchDue visible to the bus.
type claimLog struct {
	*mysql.Persistence
	log storetest.ClaimLogger
}

func (c *claimLog) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	return c.log.Due(ctx)(c.Persistence.ClaimDueOutgoing(ctx, transport, now, limit, lease))
}

func (c *claimLog) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	return c.log.Ahead(ctx)(c.Persistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease))
}

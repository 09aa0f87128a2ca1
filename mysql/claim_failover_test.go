package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

// A worker holding claimed rows is SIGKILLed while it hands them over:
// the server rolls its claim back when the connection drops, and a bus in
// this process hands every row over within 2 s of the kill
// (storetest.Failover.Killed).
func TestClaimFailoverAfterKill(t *testing.T) {
	t.Parallel()
	failover(t, testDB(t)).Killed(t)
}

// A worker holding rows claimed ahead (3 s lease, 1 s window) is
// SIGSTOPped: the server ends its idle claim after the window and the
// lease, and once the worker runs again it sends none of them
// (storetest.Failover.Frozen).
func TestClaimFailoverAfterFreeze(t *testing.T) {
	t.Parallel()
	failover(t, testDB(t)).Frozen(t, storetest.FreezeTiming{Due: 3 * time.Second, Lease: 3 * time.Second, Window: time.Second, Margin: 6 * time.Second})
}

func failover(t *testing.T, db *sql.DB) storetest.Failover {
	w := workers(t, db)
	table := w.Space
	return storetest.Failover{Workers: w,
		// Each row is locked (a SKIP LOCKED probe skips it) or, as an
		// earlier version did it, leased.
		Held: func(ctx context.Context) (total, free int, err error) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return 0, 0, err
			}
			defer func() { _ = tx.Rollback() }()
			err = tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM `"+table+"`), (SELECT COUNT(*) FROM (SELECT id FROM `"+table+
				"` WHERE lease_token IS NULL OR lease_until <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED) AS f)").Scan(&total, &free)
			return total, free, err
		},
		Takeover: func(t *testing.T) bus.Persistence {
			p, err := mysql.New(db, mysql.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
}

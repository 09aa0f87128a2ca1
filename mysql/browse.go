package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; beyond it the count is the server's estimate.
const exactCountLimit = 100_000

// browser lists and gets rows for the kit (ListScheduled, GetScheduled),
// embedded in Persistence: a range of the (due_at, id) index, or of the
// (message_type, due_at, id) index when the query names a type.
type browser = sqlstore.Browser

// newBrowseSQL is MySQL's listing of the table t.
func newBrowseSQL(t string) sqlstore.BrowseSQL {
	all := sqlstore.BrowseRange{From: "due_at >= " + at("{from}"), Until: "due_at < " + at("{until}"),
		After: "(due_at > " + at("{due}") + " OR (due_at = " + at("{due}") + " AND id > {id}))", Order: "due_at, id"}
	byType := all
	byType.Where = "message_type = {type}"
	return sqlstore.BrowseSQL{
		Placeholder: func(int) string { return "?" },
		Select: "SELECT id, kind, message_type, envelope, " + us("due_at") + ", " + us("lease_until") +
			", lease_token, failures, last_error, transport FROM " + t,
		All: all, ByType: byType,
	}
}

// StatsScheduled summarises the backlog at the server's now (the now
// argument is not used). The count is exact up to 100,000 rows, and
// beyond it the server's estimate (Estimated); overdue rows (those no claim holds) are counted on
// the claim index, one range per transport (the distinct transports are
// read with a loose scan of that index), at most bus.OverdueCap of them.
func (p *Persistence) StatsScheduled(ctx context.Context, _ time.Time) (bus.ScheduledStats, error) {
	t := p.n.table
	var st bus.ScheduledStats
	if err := p.db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM (SELECT 1 FROM %s LIMIT %d) AS c", t, exactCountLimit+1)).Scan(&st.Count); err != nil {
		return st, fmt.Errorf("mysql: scheduled stats: %w", err)
	}
	if st.Count > exactCountLimit {
		var est sql.NullInt64
		if err := p.db.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
			p.n.raw).Scan(&est); err != nil {
			return st, fmt.Errorf("mysql: scheduled stats: %w", err)
		}
		st.Count, st.Estimated = max(est.Int64, st.Count), true
	}
	rows, err := p.db.QueryContext(ctx, "SELECT DISTINCT transport FROM "+t)
	if err != nil {
		return st, fmt.Errorf("mysql: scheduled stats: %w", err)
	}
	var transports [][]byte
	for rows.Next() {
		var tr []byte
		if err := rows.Scan(&tr); err != nil {
			_ = rows.Close()
			return st, fmt.Errorf("mysql: scheduled stats: %w", err)
		}
		transports = append(transports, tr)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("mysql: scheduled stats: %w", err)
	}
	var oldestAvail, oldestDue int64
	found := false
	// Rows a claim holds are locked: being delivered, not overdue. The
	// count and the oldest skip them (SKIP LOCKED), in a READ COMMITTED
	// transaction of their own, which takes no gap locks and holds its
	// locks only for the statement's length.
	err = p.inTx(ctx, func(tx *sql.Tx) error {
		st.Overdue, oldestAvail, oldestDue, found = 0, 0, 0, false
		for _, tr := range transports {
			var n int64
			var avail, due sql.NullInt64
			err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT
	(SELECT COUNT(*) FROM (SELECT 1 FROM %[1]s WHERE transport = ? AND available_at <= UTC_TIMESTAMP(6) LIMIT %[2]d FOR UPDATE SKIP LOCKED) AS c),
	(SELECT %[3]s FROM %[1]s WHERE transport = ? AND available_at <= UTC_TIMESTAMP(6) ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),
	(SELECT %[4]s FROM %[1]s WHERE transport = ? AND available_at <= UTC_TIMESTAMP(6) ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)`,
				t, bus.OverdueCap, us("available_at"), us("due_at")), tr, tr, tr).Scan(&n, &avail, &due)
			if err != nil {
				return err
			}
			st.Overdue = min(st.Overdue+n, bus.OverdueCap)
			if avail.Valid && (!found || avail.Int64 < oldestAvail) {
				oldestAvail, oldestDue, found = avail.Int64, due.Int64, true
			}
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("mysql: scheduled stats: %w", err)
	}
	if found {
		st.OldestOverdue = fromMicros(oldestDue)
	}
	return st, nil
}

// DueHistogram counts the rows due in each bucket, in one range of the
// (due_at, id) index.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	start := from.UnixMicro()
	end := maxMicros
	if span := float64(width) / float64(time.Microsecond) * float64(n); float64(start)+span < float64(maxMicros) {
		end = start + int64(span)
		if time.Duration(end-start)*time.Microsecond < width*time.Duration(n) {
			end++
		}
	}
	start = max(start, minMicros)
	// Bucket arithmetic in DECIMAL nanoseconds: no BIGINT overflow, and
	// widths below a microsecond work too.
	out, err := sqlstore.CountBuckets(ctx, sqlstore.FromDB(p.db, nil), n, "SELECT FLOOR((CAST("+us("due_at")+" AS DECIMAL(30,0)) - ?) * 1000 / ?), COUNT(*) FROM "+p.n.table+
		" WHERE due_at >= "+atSQL+" AND due_at < "+atSQL+" GROUP BY 1", from.UnixMicro(), int64(width), start, end)
	if err != nil {
		return nil, fmt.Errorf("mysql: due histogram: %w", err)
	}
	return out, nil
}

// SendNow makes a row that no claim holds due at the server's now, and
// reports whether it did. A row a claim holds is being delivered: false,
// at once (see CancelOutgoing). Dispatchers in every process find it
// within Options.WatchInterval.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	var n int
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		if ok, err := p.lockFree(ctx, tx, id); err != nil || !ok {
			n = 0
			return err
		}
		var err error
		n, err = sqlstore.ExecCount(ctx, tx, "UPDATE "+p.n.table+
			" SET due_at = UTC_TIMESTAMP(6), available_at = UTC_TIMESTAMP(6), prior_available_at = NULL, lease_until = NULL, lease_token = NULL"+
			" WHERE id = ?", []byte(id))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mysql: send now %s: %w", id, err)
	}
	return n > 0, nil
}

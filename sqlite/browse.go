package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; beyond it the count is estimated from the rowid range.
const exactCountLimit = 100_000

// browser lists and gets rows for the kit (ListScheduled, GetScheduled),
// embedded in Persistence: a range of the (due_at, id) index, or of the
// (message_type, due_at, id) index when the query names a type.
type browser = sqlstore.Browser

// browseColumns are the columns of a listed row, in the kit's order.
const browseColumns = "id, kind, message_type, envelope, due_at, lease_until, lease_token, failures, last_error, transport"

// newBrowseSQL is SQLite's listing of the table t.
func newBrowseSQL(t string) sqlstore.BrowseSQL {
	all := sqlstore.BrowseRange{From: "due_at >= {from}", Until: "due_at < {until}", After: "(due_at, id) > ({due}, {id})", Order: "due_at, id"}
	byType := all
	byType.Where = "message_type = {type}"
	return sqlstore.BrowseSQL{Placeholder: func(int) string { return "?" }, Select: "SELECT " + browseColumns + " FROM " + t, All: all, ByType: byType}
}

// transportsCTE lists the distinct transport values by probing the claim
// index once per value.
func transportsCTE(t string) string {
	return fmt.Sprintf(`WITH RECURSIVE tr(t) AS (
	SELECT min(transport) FROM %[1]s
	UNION ALL
	SELECT (SELECT min(transport) FROM %[1]s WHERE transport > tr.t) FROM tr WHERE tr.t IS NOT NULL
) `, t)
}

// StatsScheduled summarises the backlog at the store's now (the now
// argument is not used). The count is exact up to 100,000 rows, and
// beyond it estimated from the rowid range (Estimated); overdue rows are
// counted on the claim index, one range per transport, at most
// bus.OverdueCap of them.
func (p *Persistence) StatsScheduled(ctx context.Context, _ time.Time) (bus.ScheduledStats, error) {
	t := p.q.table
	now := nanos(p.now())
	var st bus.ScheduledStats
	var oldest sql.NullInt64
	err := p.db.QueryRowContext(ctx, transportsCTE(t)+fmt.Sprintf(`SELECT
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s LIMIT %[2]d + 1)),
	(SELECT count(*) FROM (SELECT 1 FROM tr JOIN %[1]s o ON o.transport = tr.t AND o.available_at <= ?1 LIMIT %[3]d)),
	(SELECT o.due_at FROM tr JOIN %[1]s o ON o.rowid = (
		SELECT rowid FROM %[1]s WHERE transport = tr.t AND available_at <= ?1 ORDER BY available_at, id LIMIT 1)
	 ORDER BY o.available_at, o.id LIMIT 1)`, t, exactCountLimit, bus.OverdueCap), now).Scan(&st.Count, &st.Overdue, &oldest)
	if err != nil {
		return st, fmt.Errorf("sqlite: scheduled stats: %w", err)
	}
	if st.Count > exactCountLimit {
		// Two lone min/max aggregates: each reads one end of the rowid
		// b-tree (together in one SELECT they would scan it).
		var span sql.NullInt64
		if err := p.db.QueryRowContext(ctx, "SELECT (SELECT max(rowid) FROM "+t+") - (SELECT min(rowid) FROM "+t+") + 1").Scan(&span); err != nil {
			return st, fmt.Errorf("sqlite: scheduled stats: %w", err)
		}
		st.Count, st.Estimated = max(span.Int64, st.Count), true
	}
	if oldest.Valid {
		st.OldestOverdue = fromNanos(oldest.Int64)
	}
	return st, nil
}

// DueHistogram counts the rows due in each bucket, in one range of the
// (due_at, id) index.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	start := nanos(from)
	end := int64(math.MaxInt64)
	if span := int64(width); span <= (math.MaxInt64-max(start, 0))/int64(n) {
		end = start + span*int64(n)
	}
	out, err := sqlstore.CountBuckets(ctx, sqlstore.FromDB(p.db, nil), n, p.histogramSQL(), start, int64(width), end)
	if err != nil {
		return nil, fmt.Errorf("sqlite: due histogram: %w", err)
	}
	return out, nil
}

// histogramSQL counts rows per bucket: ?1 the start, ?2 the width and ?3
// the end, in Unix nanoseconds.
func (p *Persistence) histogramSQL() string {
	return "SELECT (due_at - ?1) / ?2, count(*) FROM " + p.q.table + " WHERE due_at >= ?1 AND due_at < ?3 GROUP BY 1"
}

// SendNow makes a row that no claim holds due at the store's now, and
// reports whether it did; this process's dispatchers wake for it.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	now := nanos(p.now())
	n, err := sqlstore.ExecCount(ctx, p.db, "UPDATE "+p.q.table+
		" SET due_at = ?1, available_at = ?1, lease_until = 0, lease_token = NULL WHERE id = ?2 AND (lease_token IS NULL OR lease_until <= ?1)", now, id)
	if err != nil {
		return false, fmt.Errorf("sqlite: send now %s: %w", id, err)
	}
	if n > 0 {
		p.stored.Store(true)
	}
	return n > 0, nil
}

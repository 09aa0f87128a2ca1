package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/postbus/bus"
)

var _ bus.ScheduledBrowser = (*Persistence)(nil)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; beyond it the count is estimated from the rowid range.
const exactCountLimit = 100_000

// browseColumns are the columns of a listed row, in scanBrowsed's order.
const browseColumns = "id, kind, message_type, envelope, due_at, lease_until, lease_token, failures, last_error, transport"

type scanner interface{ Scan(dest ...any) error }

func scanBrowsed(r scanner) (bus.OutgoingMessage, error) {
	var m bus.OutgoingMessage
	var kind, due, lease int64
	var token sql.NullString
	if err := r.Scan(&m.ID, &kind, &m.Type, &m.Envelope, &due, &lease, &token, &m.Failures, &m.LastError, &m.Transport); err != nil {
		return m, err
	}
	m.Kind, m.DueAt = bus.Kind(kind), fromNanos(due)
	if token.Valid {
		m.Token, m.LeaseUntil = token.String, fromNanos(lease)
	}
	return m, nil
}

// ListScheduled returns the rows q selects, earliest due first, then by
// ID: a range of the (due_at, id) index, or of the (message_type, due_at,
// id) index when q names a type, continued after (AfterDue, AfterID).
func (p *Persistence) ListScheduled(ctx context.Context, q bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	query, args := p.listScheduledSQL(q)
	rows, err := p.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list scheduled: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.OutgoingMessage
	for rows.Next() {
		m, err := scanBrowsed(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list scheduled: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list scheduled: %w", err)
	}
	return out, nil
}

func (p *Persistence) listScheduledSQL(q bus.ScheduledQuery) (string, []any) {
	var where []string
	var args []any
	if q.Type != "" {
		where, args = append(where, "message_type = ?"), append(args, q.Type)
	}
	if !q.DueAfter.IsZero() {
		where, args = append(where, "due_at >= ?"), append(args, nanos(q.DueAfter))
	}
	if !q.DueBefore.IsZero() {
		where, args = append(where, "due_at < ?"), append(args, nanos(q.DueBefore))
	}
	if !q.AfterDue.IsZero() {
		where, args = append(where, "(due_at, id) > (?, ?)"), append(args, nanos(q.AfterDue), q.AfterID)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query := "SELECT " + browseColumns + " FROM " + p.q.table
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + " ORDER BY due_at, id LIMIT ?", append(args, limit)
}

// GetScheduled returns the row with the ID, by primary key.
func (p *Persistence) GetScheduled(ctx context.Context, id string) (bus.OutgoingMessage, bool, error) {
	m, err := scanBrowsed(p.db.QueryRowContext(ctx, "SELECT "+browseColumns+" FROM "+p.q.table+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return bus.OutgoingMessage{}, false, nil
	}
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("sqlite: get scheduled %s: %w", id, err)
	}
	return m, true, nil
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
		var span sql.NullInt64
		if err := p.db.QueryRowContext(ctx, "SELECT max(rowid) - min(rowid) + 1 FROM "+t).Scan(&span); err != nil {
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
	rows, err := p.db.QueryContext(ctx, "SELECT (due_at - ?1) / ?2, count(*) FROM "+p.q.table+
		" WHERE due_at >= ?1 AND due_at < ?3 GROUP BY 1", start, int64(width), end)
	if err != nil {
		return nil, fmt.Errorf("sqlite: due histogram: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := make([]int64, n)
	for rows.Next() {
		var b, c int64
		if err := rows.Scan(&b, &c); err != nil {
			return nil, fmt.Errorf("sqlite: due histogram: %w", err)
		}
		if b >= 0 && b < int64(n) {
			out[b] += c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: due histogram: %w", err)
	}
	return out, nil
}

// SendNow makes a row that no claim holds due at the store's now, and
// reports whether it did; this process's dispatchers wake for it.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	now := nanos(p.now())
	n, err := execCount(ctx, p.db, "UPDATE "+p.q.table+
		" SET due_at = ?1, available_at = ?1, lease_until = 0, lease_token = NULL WHERE id = ?2 AND (lease_token IS NULL OR lease_until <= ?1)", now, id)
	if err != nil {
		return false, fmt.Errorf("sqlite: send now %s: %w", id, err)
	}
	if n > 0 {
		p.stored.Store(true)
	}
	return n > 0, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
)

var _ bus.ScheduledBrowser = (*Persistence)(nil)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; a larger table is estimated from the catalog.
const exactCountLimit = 100_000

// browseColumns are the columns of a listed row, in scanBrowsed's order.
const browseColumns = `id, kind, message_type, envelope, due_at, lease_until, lease_token, failures, last_error, transport`

func scanBrowsed(row pgx.Row) (bus.OutgoingMessage, error) {
	var m bus.OutgoingMessage
	var kind int16
	var failures int32
	var lease *time.Time
	var token *string
	if err := row.Scan(&m.ID, &kind, &m.Type, &m.Envelope, &m.DueAt, &lease, &token, &failures, &m.LastError, &m.Transport); err != nil {
		return m, err
	}
	m.Kind, m.Failures = bus.Kind(kind), int(failures)
	if lease != nil && token != nil {
		m.LeaseUntil, m.Token = *lease, *token
	}
	return m, nil
}

// ListScheduled returns the rows q selects, earliest due first, then by ID,
// in one ordered scan of the (due_at, id) index, or of the (message_type,
// due_at, id) index when q names a type; paging continues after
// (AfterDue, AfterID) in the index, so deep pages cost what the first does.
func (p *Persistence) ListScheduled(ctx context.Context, q bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	sql, args := listScheduledSQL(p.names.table, q)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list scheduled: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.OutgoingMessage, error) { return scanBrowsed(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list scheduled: %w", err)
	}
	return out, nil
}

// listScheduledSQL builds the listing for q: only the conditions q sets,
// so every plan is a plain range scan of one index.
func listScheduledSQL(table string, q bus.ScheduledQuery) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	if q.Type != "" {
		// Bounds as row comparisons on (message_type, due_at, id): the
		// index conditions of the type index only, so that every plan,
		// generic ones too, ranges over it instead of filtering the due
		// index, whatever the type's share of the rows.
		typ := arg(cleanText(q.Type))
		lower := "'-infinity'::timestamptz"
		if !q.DueAfter.IsZero() {
			lower = arg(q.DueAfter) + "::timestamptz"
		}
		where = append(where, fmt.Sprintf("(message_type, due_at) >= (%s::text, %s)", typ, lower))
		if !q.AfterDue.IsZero() {
			where = append(where, fmt.Sprintf("(message_type, due_at, id) > (%s::text, %s::timestamptz, %s::text)", typ, arg(q.AfterDue), arg(cleanText(q.AfterID))))
		}
		upper := "'infinity'::timestamptz"
		if !q.DueBefore.IsZero() {
			upper = arg(q.DueBefore) + "::timestamptz"
		}
		where = append(where, fmt.Sprintf("(message_type, due_at) < (%s::text, %s)", typ, upper))
		return "SELECT " + browseColumns + " FROM " + table + " WHERE " + strings.Join(where, " AND ") +
			" ORDER BY message_type, due_at, id LIMIT " + arg(limit), args
	}
	if !q.DueAfter.IsZero() {
		where = append(where, "due_at >= "+arg(q.DueAfter)+"::timestamptz")
	}
	if !q.DueBefore.IsZero() {
		where = append(where, "due_at < "+arg(q.DueBefore)+"::timestamptz")
	}
	if !q.AfterDue.IsZero() {
		where = append(where, fmt.Sprintf("(due_at, id) > (%s::timestamptz, %s::text)", arg(q.AfterDue), arg(cleanText(q.AfterID))))
	}
	sql := "SELECT " + browseColumns + " FROM " + table
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	return sql + " ORDER BY due_at, id LIMIT " + arg(limit), args
}

// GetScheduled returns the row with the ID, by primary key.
func (p *Persistence) GetScheduled(ctx context.Context, id string) (bus.OutgoingMessage, bool, error) {
	m, err := scanBrowsed(p.pool.QueryRow(ctx, "SELECT "+browseColumns+" FROM "+p.names.table+" WHERE id = $1", cleanText(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return bus.OutgoingMessage{}, false, nil
	}
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("postgres: get scheduled %s: %w", id, err)
	}
	return m, true, nil
}

// statsSQL is StatsScheduled's single statement. Its parts:
//
//   - est: the catalog's row estimate, scaled to the table's current size as
//     the planner does (reltuples per page times pages).
//   - exact: the rows counted one by one, at most exactCountLimit+1 of them
//     (an index-only scan that stops there); evaluated only when the
//     estimate is below the limit.
//   - transports: the distinct transport values, found by probing the claim
//     index once per value (a loose index scan), so that
//   - overdue counts, per transport, the rows claimable at now() from the
//     start of the claim index, at most bus.OverdueCap in all, and
//   - oldest takes the first claimable row of each transport in the claim
//     index and keeps the earliest.
//
// The now argument of StatsScheduled is ignored: "overdue" is judged on the
// database clock, the one claims use.
func statsSQL(n names) string {
	return fmt.Sprintf(`WITH RECURSIVE transports AS (
	SELECT min(transport) AS t FROM %[1]s
	UNION ALL
	SELECT (SELECT min(transport) FROM %[1]s WHERE transport > transports.t) FROM transports WHERE transports.t IS NOT NULL
), est AS (
	SELECT CASE WHEN c.relpages > 0
	            THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
	            ELSE greatest(c.reltuples, 0) END::bigint AS n
	FROM pg_class c WHERE c.oid = to_regclass($1)
)
SELECT (SELECT n FROM est),
       CASE WHEN (SELECT n FROM est) < %[2]d
            THEN (SELECT count(*) FROM (SELECT 1 FROM %[1]s LIMIT %[2]d + 1) AS c) END,
       (SELECT count(*) FROM (
            SELECT 1 FROM transports CROSS JOIN LATERAL (
                SELECT 1 FROM %[1]s o WHERE o.transport = transports.t AND o.available_at <= now() LIMIT %[3]d) AS r
            LIMIT %[3]d) AS c),
       (SELECT r.due_at FROM transports CROSS JOIN LATERAL (
            SELECT o.due_at, o.available_at, o.id FROM %[1]s o
            WHERE o.transport = transports.t AND o.available_at <= now()
            ORDER BY o.available_at, o.id LIMIT 1) AS r
        ORDER BY r.available_at, r.id LIMIT 1)`, n.table, exactCountLimit, bus.OverdueCap)
}

// StatsScheduled summarises the backlog on the database clock. The count is
// exact up to 100,000 rows; beyond, it is the catalog's estimate (as fresh
// as the last VACUUM or ANALYZE, scaled to the table's current size) and
// Estimated is set. Overdue rows are counted from the claim index, at most
// bus.OverdueCap of them. Nothing scans the table: see statsSQL.
func (p *Persistence) StatsScheduled(ctx context.Context, _ time.Time) (bus.ScheduledStats, error) {
	var est int64
	var exact *int64
	var st bus.ScheduledStats
	var oldest *time.Time
	err := p.pool.QueryRow(ctx, statsSQL(p.names), p.names.regTbl).Scan(&est, &exact, &st.Overdue, &oldest)
	if err != nil {
		return st, fmt.Errorf("postgres: scheduled stats: %w", err)
	}
	switch {
	case exact != nil && *exact <= exactCountLimit:
		st.Count = *exact
	default:
		st.Count, st.Estimated = max(est, exactCountLimit+1), true
	}
	if oldest != nil {
		st.OldestOverdue = *oldest
	}
	return st, nil
}

// histogramSQL counts rows per bucket in one range scan of the (due_at, id)
// index, from $1 (inclusive) to $3 (exclusive), in buckets of $2
// microseconds.
func histogramSQL(table string) string {
	return fmt.Sprintf(`SELECT floor(extract(epoch FROM due_at - $1::timestamptz) * 1000000 / $2::bigint)::bigint AS b, count(*)
FROM %s WHERE due_at >= $1::timestamptz AND due_at < $3::timestamptz
GROUP BY b`, table)
}

// DueHistogram counts the rows due in each of n buckets of width from
// from, in one statement over the (due_at, id) index. Widths are used in
// whole microseconds.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	w := max(width.Microseconds(), 1)
	to := from.Add(time.Duration(w) * time.Microsecond * time.Duration(n))
	rows, err := p.pool.Query(ctx, histogramSQL(p.names.table), from, w, to)
	if err != nil {
		return nil, fmt.Errorf("postgres: due histogram: %w", err)
	}
	out := make([]int64, n)
	var b, c int64
	_, err = pgx.ForEachRow(rows, []any{&b, &c}, func() error {
		if b >= 0 && b < int64(n) {
			out[b] += c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: due histogram: %w", err)
	}
	return out, nil
}

// SendNow makes a row that is not leased due at the database's now(), so
// the next claim takes it, and reports whether it did. Unless notifications
// are off it notifies the dispatchers in the same statement.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	update := fmt.Sprintf(`UPDATE %s SET due_at = now(), available_at = now(), lease_until = NULL, lease_token = NULL
WHERE id = $1 AND (lease_token IS NULL OR lease_until <= now()) RETURNING due_at`, p.names.table)
	sql := `WITH u AS (` + update + `) SELECT count(*) FROM u`
	args := []any{cleanText(id)}
	if !p.opts.DisableNotify {
		sql = `WITH u AS (` + update + `),
n AS (SELECT pg_notify($2, (extract(epoch FROM min(due_at)) * 1000000)::bigint::text) FROM u HAVING count(*) > 0)
SELECT (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM n)`
		args = append(args, p.names.channel)
	}
	var n int64
	if err := p.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return false, fmt.Errorf("postgres: send now %s: %w", id, err)
	}
	return n > 0, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; a larger table is estimated from the catalog.
const exactCountLimit = 100_000

// browser lists and gets rows for the kit (ListScheduled, GetScheduled),
// embedded in Persistence: one ordered scan of the (due_at, id) index, or
// of the (message_type, due_at, id) index when the query names a type;
// paging continues after (AfterDue, AfterID) in the index, so deep pages
// cost what the first does.
type browser = sqlstore.Browser

// newBrowseSQL is PostgreSQL's listing of the table t. With a type, the
// bounds are row comparisons on (message_type, due_at, id): the index
// conditions of the type index only, so that every plan, generic ones
// too, ranges over it instead of filtering the due index, whatever the
// type's share of the rows.
func newBrowseSQL(t string) sqlstore.BrowseSQL {
	return sqlstore.BrowseSQL{
		Placeholder: placeholder,
		Clean:       cleanText,
		Storable:    storableID,
		Select:      "SELECT id, kind, message_type, envelope, due_at, lease_until, lease_token, failures, last_error, transport FROM " + t,
		All: sqlstore.BrowseRange{
			From:  "due_at >= {from}::timestamptz",
			Until: "due_at < {until}::timestamptz",
			After: "(due_at, id) > ({due}::timestamptz, {id}::text)",
			Order: "due_at, id",
		},
		ByType: sqlstore.BrowseRange{
			From:    "(message_type, due_at) >= ({type}::text, {from}::timestamptz)",
			NoFrom:  "(message_type, due_at) >= ({type}::text, '-infinity'::timestamptz)",
			Until:   "(message_type, due_at) < ({type}::text, {until}::timestamptz)",
			NoUntil: "(message_type, due_at) < ({type}::text, 'infinity'::timestamptz)",
			After:   "(message_type, due_at, id) > ({type}::text, {due}::timestamptz, {id}::text)",
			Order:   "message_type, due_at, id",
		},
	}
}

// statsSQL is StatsScheduled's single statement. Its parts:
//
//   - est: the catalog's row estimate, scaled to the table's current size as
//     the planner does (reltuples per page times pages).
//   - exact: the rows counted one by one, at most exactCountLimit+1 of them
//     (a scan of the table or an index, the planner's choice, that stops
//     there); evaluated only when the estimate is below the limit.
//   - transports: the distinct transport values, found by probing the claim
//     index once per value (a loose index scan), so that
//   - overdue counts, per transport, the rows claimable at now() from the
//     start of the claim index, at most bus.OverdueCap in all, and
//   - oldest takes the first claimable row of each transport in the claim
//     index and keeps the earliest.
//
// Rows a claim holds locked are being delivered, not overdue: both parts
// skip them (FOR KEY SHARE SKIP LOCKED, which takes a share lock on each
// row counted for the statement's length, so a claim running at that
// moment may skip such a row until its next poll).
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
                SELECT 1 FROM %[1]s o WHERE o.transport = transports.t AND o.available_at <= now() LIMIT %[3]d
                FOR KEY SHARE SKIP LOCKED) AS r
            LIMIT %[3]d) AS c),
       (SELECT r.due_at FROM transports CROSS JOIN LATERAL (
            SELECT o.due_at, o.available_at, o.id FROM %[1]s o
            WHERE o.transport = transports.t AND o.available_at <= now()
            ORDER BY o.available_at, o.id LIMIT 1
            FOR KEY SHARE SKIP LOCKED) AS r
        ORDER BY r.available_at, r.id LIMIT 1)`, n.table, exactCountLimit, bus.OverdueCap)
}

// StatsScheduled summarises the backlog on the database clock. The count is
// exact up to 100,000 rows; beyond, it is the catalog's estimate (as fresh
// as the last VACUUM or ANALYZE, scaled to the table's current size) and
// Estimated is set. Overdue rows are counted from the claim index, at most
// bus.OverdueCap of them. No part reads more than exactCountLimit+1 rows:
// see statsSQL.
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

// exactHistogramLimit is the number of rows in a histogram's window up to
// which DueHistogram counts them one by one (about 25 ms); beyond it, it
// estimates from the planner's statistics.
const exactHistogramLimit = 100_000

// histogramSQL counts rows per bucket in one range scan of the (due_at, id)
// index, from $2 (inclusive) to $3 (exclusive), in buckets of interval $1
// (date_bin: PostgreSQL 14 or later).
func histogramSQL(table string) string {
	return fmt.Sprintf(`SELECT date_bin($1::interval, due_at, $2::timestamptz) AS b, count(*)
FROM %s WHERE due_at >= $2::timestamptz AND due_at < $3::timestamptz
GROUP BY b`, table)
}

// DueHistogram counts the rows due in each of n buckets of width from
// from (widths in whole microseconds). A window of up to about 100,000
// rows is counted exactly in one range scan of the (due_at, id) index.
// Counting a larger one would take longer than a page may (a million rows
// take a third of a second), so it is estimated, as the planner does, from
// the statistics ANALYZE (or autovacuum) keeps on due_at: its most common
// values and its equal-depth histogram, scaled to the table's current
// size. The estimate is as fresh as those statistics.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	w := time.Duration(max(width.Microseconds(), 1)) * time.Microsecond
	to := from.Add(w * time.Duration(n))
	if to.Before(from) { // overflow: far enough
		to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	st, err := p.dueStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: due histogram: %w", err)
	}
	if st.usable() && st.estimate(from, to) > exactHistogramLimit {
		out := make([]int64, n)
		for i := range out {
			a := from.Add(w * time.Duration(i))
			out[i] = int64(st.estimate(a, a.Add(w)) + 0.5)
		}
		return out, nil
	}
	rows, err := p.pool.Query(ctx, histogramSQL(p.names.table), w, from, to)
	if err != nil {
		return nil, fmt.Errorf("postgres: due histogram: %w", err)
	}
	out := make([]int64, n)
	var b time.Time
	var c int64
	_, err = pgx.ForEachRow(rows, []any{&b, &c}, func() error {
		if i := int64(b.Sub(from) / w); i >= 0 && i < int64(n) {
			out[i] += c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: due histogram: %w", err)
	}
	return out, nil
}

// dueStatistics are the planner's statistics on due_at, in Unix seconds.
type dueStatistics struct {
	rows     float64   // the table's estimated rows, scaled to its size
	bounds   []float64 // the equal-depth histogram's bounds
	mcv      []float64 // the most common values
	freqs    []float64 // their frequencies
	histFrac float64   // the share of rows the histogram describes
}

func (s *dueStatistics) usable() bool { return s.rows > 0 && (len(s.bounds) > 1 || len(s.mcv) > 0) }

// estimate returns the estimated number of rows due in [a, b).
func (s *dueStatistics) estimate(a, b time.Time) float64 {
	lo, hi := float64(a.UnixMicro())/1e6, float64(b.UnixMicro())/1e6
	frac := 0.0
	for i, v := range s.mcv {
		if v >= lo && v < hi {
			frac += s.freqs[i]
		}
	}
	if k := len(s.bounds) - 1; k > 0 {
		in := 0.0
		for i := range k {
			x, y := s.bounds[i], s.bounds[i+1]
			switch {
			case y <= x:
				if x >= lo && x < hi {
					in++
				}
			default:
				if o := min(y, hi) - max(x, lo); o > 0 {
					in += o / (y - x)
				}
			}
		}
		frac += s.histFrac * in / float64(k)
	}
	return frac * s.rows
}

// dueStats reads the statistics of due_at: one catalog query.
func (p *Persistence) dueStats(ctx context.Context) (dueStatistics, error) {
	var st dueStatistics
	var bounds, mcv []float64
	var freqs []float32
	var nullFrac *float32
	err := p.pool.QueryRow(ctx, `SELECT
	CASE WHEN c.relpages > 0
	     THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
	     ELSE greatest(c.reltuples, 0) END,
	array(SELECT extract(epoch FROM v)::float8 FROM unnest(s.histogram_bounds::text::timestamptz[]) AS v),
	array(SELECT extract(epoch FROM v)::float8 FROM unnest(s.most_common_vals::text::timestamptz[]) AS v),
	s.most_common_freqs, s.null_frac
FROM pg_class c
JOIN pg_namespace ns ON ns.oid = c.relnamespace
LEFT JOIN pg_stats s ON s.schemaname = ns.nspname AND s.tablename = c.relname AND s.attname = 'due_at'
WHERE c.oid = to_regclass($1)`, p.names.regTbl).Scan(&st.rows, &bounds, &mcv, &freqs, &nullFrac)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.bounds, st.mcv = bounds, mcv
	st.histFrac = 1
	for _, f := range freqs {
		st.freqs = append(st.freqs, float64(f))
		st.histFrac -= float64(f)
	}
	if nullFrac != nil {
		st.histFrac -= float64(*nullFrac)
	}
	if len(st.freqs) != len(st.mcv) {
		st.mcv, st.freqs = nil, nil
	}
	st.histFrac = max(st.histFrac, 0)
	return st, nil
}

// SendNow makes a row that no claim holds due at the database's now(), so
// the next claim takes it, and reports whether it did. Unless notifications
// are off it notifies the dispatchers in the same statement.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	update := fmt.Sprintf(`UPDATE %s SET due_at = now(), available_at = now(), lease_until = NULL, lease_token = NULL
WHERE %s RETURNING due_at`, p.names.table, notHeld(p.names.table, "id = $1"))
	sql := `WITH u AS (` + update + `) SELECT count(*) FROM u`
	if !storableID(id) {
		return false, nil // no stored row has it
	}
	args := []any{id}
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

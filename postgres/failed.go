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

var _ bus.FailedStore = (*Persistence)(nil)

// failedColumns are the columns of a failed message, in scanFailed's order.
const failedColumns = `id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope`

func scanFailed(row pgx.Row) (bus.FailedMessage, error) {
	var m bus.FailedMessage
	var attempts, failures int32
	err := row.Scan(&m.ID, &m.Type, &m.Endpoint, &m.Queue, &m.Kind, &m.Reason, &m.Group, &attempts, &failures,
		&m.FirstFailed, &m.LastFailed, &m.Envelope)
	m.Attempts, m.Failures = int(attempts), int(failures)
	m.FirstFailed, m.LastFailed = m.FirstFailed.UTC(), m.LastFailed.UTC()
	return m, err
}

// storeFailedSQL inserts a batch of distinct IDs. On a conflict, a
// different last_failed is a new failure: it is counted, first_failed keeps
// the earliest time, and when it is the latest failure its fields replace
// the stored ones. The same last_failed is the same failure delivered
// again, and the WHERE clause leaves the row alone.
func storeFailedSQL(table string) string {
	newer := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN excluded.last_failed > f.last_failed THEN excluded.%[1]s ELSE f.%[1]s END", col)
	}
	var sets []string
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, newer(c))
	}
	return fmt.Sprintf(`INSERT INTO %s AS f (%s)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::int[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::bytea[])
ON CONFLICT (id) DO UPDATE SET
	failures = f.failures + 1,
	first_failed = least(f.first_failed, excluded.first_failed),
	last_failed = greatest(f.last_failed, excluded.last_failed),
	%s
WHERE f.last_failed <> excluded.last_failed`, table, failedColumns, strings.Join(sets, ",\n\t"))
}

// StoreFailed inserts or updates the messages (see bus.FailedStore), one
// statement per batch of distinct IDs: a batch that holds an ID twice is
// stored in several statements, in order, in one transaction. Times are
// kept to the microsecond.
func (p *Persistence) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for _, m := range msgs {
		switch {
		case m.ID == "":
			return &InvalidRowError{Reason: "empty failed-message ID"}
		case !storableID(m.ID):
			return &InvalidRowError{ID: m.ID, Reason: "failed-message ID is not valid UTF-8 text without NUL bytes"}
		}
	}
	rounds := distinctRounds(msgs)
	sql := storeFailedSQL(p.names.failed)
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for _, r := range rounds {
			if _, err := tx.Exec(ctx, sql, failedArgs(r)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: store failed messages: %w", err)
	}
	return nil
}

// distinctRounds splits msgs, in order, into batches without a repeated
// ID.
func distinctRounds(msgs []bus.FailedMessage) [][]bus.FailedMessage {
	var rounds [][]bus.FailedMessage
	var seen []map[string]bool
	for _, m := range msgs {
		i := 0
		// The round after the last one holding this ID, so order is kept.
		for j := len(rounds) - 1; j >= 0; j-- {
			if seen[j][m.ID] {
				i = j + 1
				break
			}
		}
		if i == len(rounds) {
			rounds, seen = append(rounds, nil), append(seen, map[string]bool{})
		}
		rounds[i], seen[i][m.ID] = append(rounds[i], m), true
	}
	return rounds
}

func failedArgs(msgs []bus.FailedMessage) []any {
	n := len(msgs)
	ids, types, endpoints, queues, kinds, reasons, groups := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, failures := make([]int32, n), make([]int32, n)
	first, last := make([]time.Time, n), make([]time.Time, n)
	envs := make([][]byte, n)
	for i, m := range msgs {
		ids[i], types[i], endpoints[i], queues[i] = m.ID, cleanText(m.Type), cleanText(m.Endpoint), cleanText(m.Queue)
		kinds[i], reasons[i], groups[i] = cleanText(m.Kind), cleanText(m.Reason), cleanText(m.Group)
		attempts[i], failures[i] = int32(m.Attempts), int32(max(m.Failures, 1))
		last[i] = m.LastFailed
		first[i] = m.FirstFailed
		if first[i].IsZero() || first[i].After(last[i]) {
			first[i] = last[i]
		}
		envs[i] = m.Envelope
		if envs[i] == nil {
			envs[i] = []byte{}
		}
	}
	return []any{ids, types, endpoints, queues, kinds, reasons, groups, attempts, failures, first, last, envs}
}

// failedWhere builds the conditions of q (paging included when page is
// set), with only the filters q sets, so that each plan is a range scan of
// the (failure_group, last_failed, id) index when q names a group, or of
// the (last_failed, id) index otherwise, or a primary-key probe for Search.
func failedWhere(q bus.FailedQuery, page bool) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	for _, c := range []struct{ col, v string }{{"failure_group", q.Group}, {"message_type", q.Type}, {"endpoint", q.Endpoint}, {"id", q.Search}} {
		if c.v != "" {
			where = append(where, c.col+" = "+arg(cleanText(c.v)))
		}
	}
	if page && !q.BeforeFailed.IsZero() {
		where = append(where, fmt.Sprintf("(last_failed, id) < (%s::timestamptz, %s::text)", arg(q.BeforeFailed), arg(cleanText(q.BeforeID))))
	}
	if len(where) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

// ListFailed returns the messages q selects, most recent failure first,
// then by ID (descending), reading the (last_failed, id) or group index
// backwards from the page's start.
func (p *Persistence) ListFailed(ctx context.Context, q bus.FailedQuery) ([]bus.FailedMessage, error) {
	sql, args := listFailedSQL(p.names.failed, q)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list failed: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.FailedMessage, error) { return scanFailed(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list failed: %w", err)
	}
	return out, nil
}

func listFailedSQL(table string, q bus.FailedQuery) (string, []any) {
	where, args := failedWhere(q, true)
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	return fmt.Sprintf("SELECT %s FROM %s%s ORDER BY last_failed DESC, id DESC LIMIT $%d", failedColumns, table, where, len(args)), args
}

// CountFailed counts the messages q selects. A count by group reads the
// group index only.
func (p *Persistence) CountFailed(ctx context.Context, q bus.FailedQuery) (int64, error) {
	where, args := failedWhere(q, false)
	var n int64
	if err := p.pool.QueryRow(ctx, "SELECT count(*) FROM "+p.names.failed+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count failed: %w", err)
	}
	return n, nil
}

// GetFailed returns the message with the ID, by primary key.
func (p *Persistence) GetFailed(ctx context.Context, id string) (bus.FailedMessage, bool, error) {
	if !storableID(id) {
		return bus.FailedMessage{}, false, nil // no stored message has it
	}
	m, err := scanFailed(p.pool.QueryRow(ctx, "SELECT "+failedColumns+" FROM "+p.names.failed+" WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return bus.FailedMessage{}, false, nil
	}
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("postgres: get failed %s: %w", id, err)
	}
	return m, true, nil
}

// failedGroupsSQL aggregates the (failure_group, last_failed, id) INCLUDE
// (first_failed) index, in its order, without touching the table (an
// index-only scan, as fresh as the visibility map), then reads one message
// of each of the $1 largest groups for its type, endpoint and reason.
func failedGroupsSQL(table string) string {
	return fmt.Sprintf(`SELECT g.failure_group, g.n, g.first_failed, g.last_failed, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, count(*) AS n, min(first_failed) AS first_failed, max(last_failed) AS last_failed
      FROM %[1]s GROUP BY failure_group
      ORDER BY n DESC, last_failed DESC, failure_group LIMIT $1) AS g
CROSS JOIN LATERAL (SELECT message_type, endpoint, reason FROM %[1]s f
                    WHERE f.failure_group = g.failure_group ORDER BY f.last_failed DESC, f.id DESC LIMIT 1) AS m
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, table)
}

// FailedGroups returns up to limit groups (0: 100), largest first; the
// reason of a group is the normalised reason of its latest failure.
func (p *Persistence) FailedGroups(ctx context.Context, limit int) ([]bus.FailedGroup, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := p.pool.Query(ctx, failedGroupsSQL(p.names.failed), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: failed groups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.FailedGroup, error) {
		var g bus.FailedGroup
		err := r.Scan(&g.Group, &g.Count, &g.FirstFailed, &g.LastFailed, &g.Type, &g.Endpoint, &g.Reason)
		g.Reason = bus.NormalizeReason(g.Reason)
		g.FirstFailed, g.LastFailed = g.FirstFailed.UTC(), g.LastFailed.UTC()
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: failed groups: %w", err)
	}
	return out, nil
}

// DeleteFailed deletes the messages with the IDs, in one statement, and
// returns how many it deleted.
func (p *Persistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, ctx.Err()
	}
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		if storableID(id) { // any other matches no message
			keys = append(keys, id)
		}
	}
	tag, err := p.pool.Exec(ctx, "DELETE FROM "+p.names.failed+" WHERE id = ANY($1::text[])", keys)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete failed: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

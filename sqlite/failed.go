package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/postbus/bus"
)

var _ bus.FailedStore = (*Persistence)(nil)

// The failed-message table is Options.Table + "_failed", created by Setup,
// with an index on (last_failed, id) for the most-recent-first listing and
// one on (failure_group, last_failed, id, first_failed) that serves
// grouping, and listing and counting a group, without reading the table.

const failedColumns = "id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope"

func (p *Persistence) failedTable() string { return p.q.table + "_failed" }

func scanFailed(r scanner) (bus.FailedMessage, error) {
	var m bus.FailedMessage
	var first, last int64
	err := r.Scan(&m.ID, &m.Type, &m.Endpoint, &m.Queue, &m.Kind, &m.Reason, &m.Group, &m.Attempts, &m.Failures, &first, &last, &m.Envelope)
	m.FirstFailed, m.LastFailed = fromNanos(first).UTC(), fromNanos(last).UTC()
	return m, err
}

// StoreFailed inserts or updates the messages in one transaction (see
// bus.FailedStore): a different last_failed is a new failure, counted, and
// its fields win when it is the latest; the same last_failed changes
// nothing.
func (p *Persistence) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for _, m := range msgs {
		if m.ID == "" {
			return fmt.Errorf("sqlite: store failed messages: %w: empty ID", bus.ErrInvalidMessage)
		}
	}
	newer := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN excluded.last_failed > last_failed THEN excluded.%[1]s ELSE %[1]s END", col)
	}
	var sets []string
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, newer(c))
	}
	// SQLite evaluates every SET expression on the old row, so last_failed
	// on the right is the stored one throughout.
	upsert := "INSERT INTO " + p.failedTable() + " (" + failedColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" +
		` ON CONFLICT (id) DO UPDATE SET failures = failures + 1,
	first_failed = min(first_failed, excluded.first_failed),
	last_failed = max(last_failed, excluded.last_failed), ` + strings.Join(sets, ", ") +
		" WHERE last_failed <> excluded.last_failed"
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: store failed messages: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, upsert)
	if err != nil {
		return fmt.Errorf("sqlite: store failed messages: %w", err)
	}
	defer func() { _ = stmt.Close() }()
	for _, m := range msgs {
		first, last := nanos(m.FirstFailed), nanos(m.LastFailed)
		if first == 0 || first > last {
			first = last
		}
		env := m.Envelope
		if env == nil {
			env = []byte{}
		}
		if _, err := stmt.ExecContext(ctx, m.ID, m.Type, m.Endpoint, m.Queue, m.Kind, m.Reason, m.Group, m.Attempts,
			max(m.Failures, 1), first, last, env); err != nil {
			return fmt.Errorf("sqlite: store failed messages: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: store failed messages: %w", err)
	}
	return nil
}

// failedWhere builds the conditions of q; paging only when page is set.
func failedWhere(q bus.FailedQuery, page bool) (string, []any) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"failure_group", q.Group}, {"message_type", q.Type}, {"endpoint", q.Endpoint}, {"id", q.Search}} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, c.v)
		}
	}
	if page && !q.BeforeFailed.IsZero() {
		where, args = append(where, "(last_failed, id) < (?, ?)"), append(args, nanos(q.BeforeFailed), q.BeforeID)
	}
	if len(where) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

// ListFailed returns the messages q selects, most recent failure first,
// then by ID descending.
func (p *Persistence) ListFailed(ctx context.Context, q bus.FailedQuery) ([]bus.FailedMessage, error) {
	where, args := failedWhere(q, true)
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := p.db.QueryContext(ctx, "SELECT "+failedColumns+" FROM "+p.failedTable()+where+
		" ORDER BY last_failed DESC, id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list failed: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.FailedMessage
	for rows.Next() {
		m, err := scanFailed(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list failed: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list failed: %w", err)
	}
	return out, nil
}

// CountFailed counts the messages q selects.
func (p *Persistence) CountFailed(ctx context.Context, q bus.FailedQuery) (int64, error) {
	where, args := failedWhere(q, false)
	var n int64
	if err := p.db.QueryRowContext(ctx, "SELECT count(*) FROM "+p.failedTable()+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count failed: %w", err)
	}
	return n, nil
}

// GetFailed returns the message with the ID, by primary key.
func (p *Persistence) GetFailed(ctx context.Context, id string) (bus.FailedMessage, bool, error) {
	m, err := scanFailed(p.db.QueryRowContext(ctx, "SELECT "+failedColumns+" FROM "+p.failedTable()+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return bus.FailedMessage{}, false, nil
	}
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("sqlite: get failed %s: %w", id, err)
	}
	return m, true, nil
}

// FailedGroups returns up to limit groups (0: 100), largest first,
// aggregated from the group index; each group's type, endpoint and reason
// come from its latest failure.
func (p *Persistence) FailedGroups(ctx context.Context, limit int) ([]bus.FailedGroup, error) {
	if limit <= 0 {
		limit = 100
	}
	f := p.failedTable()
	rows, err := p.db.QueryContext(ctx, fmt.Sprintf(`SELECT g.failure_group, g.n, g.first_failed, g.last_failed, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, count(*) AS n, min(first_failed) AS first_failed, max(last_failed) AS last_failed
      FROM %[1]s GROUP BY failure_group ORDER BY n DESC, last_failed DESC, failure_group LIMIT ?) AS g
JOIN %[1]s m ON m.rowid = (SELECT rowid FROM %[1]s WHERE failure_group = g.failure_group ORDER BY last_failed DESC, id DESC LIMIT 1)
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, f), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: failed groups: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.FailedGroup
	for rows.Next() {
		var g bus.FailedGroup
		var first, last int64
		if err := rows.Scan(&g.Group, &g.Count, &first, &last, &g.Type, &g.Endpoint, &g.Reason); err != nil {
			return nil, fmt.Errorf("sqlite: failed groups: %w", err)
		}
		g.FirstFailed, g.LastFailed, g.Reason = fromNanos(first).UTC(), fromNanos(last).UTC(), bus.NormalizeReason(g.Reason)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: failed groups: %w", err)
	}
	return out, nil
}

// DeleteFailed deletes the messages with the IDs in one statement and
// returns how many it deleted.
func (p *Persistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, ctx.Err()
	}
	n, err := execCount(ctx, p.db, "DELETE FROM "+p.failedTable()+" WHERE id IN (SELECT value FROM json_each(?))", idList(ids))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete failed: %w", err)
	}
	return n, nil
}

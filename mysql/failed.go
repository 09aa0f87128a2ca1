package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/postbus/bus"
)

var _ bus.FailedStore = (*Persistence)(nil)

// The failed-message table is Options.Table + "_failed", created by
// Setup, with an index on (last_failed, id) for the most-recent-first
// listing and one on (failure_group, last_failed, id, first_failed) that
// serves grouping, and listing and counting a group, from the index.

func (p *Persistence) failedColumns() string {
	return "id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, " +
		us("first_failed") + ", " + us("last_failed") + ", envelope"
}

func scanFailed(r rowScanner) (bus.FailedMessage, error) {
	var m bus.FailedMessage
	var id, typ, endpoint, queue, kind, group []byte
	var first, last int64
	err := r.Scan(&id, &typ, &endpoint, &queue, &kind, &m.Reason, &group, &m.Attempts, &m.Failures, &first, &last, &m.Envelope)
	m.ID, m.Type, m.Endpoint, m.Queue, m.Kind, m.Group = string(id), string(typ), string(endpoint), string(queue), string(kind), string(group)
	m.FirstFailed, m.LastFailed = fromMicros(first), fromMicros(last)
	return m, err
}

// StoreFailed inserts or updates the messages in one transaction (see
// bus.FailedStore), one upsert each: a different last_failed is a new
// failure, counted, and its fields win when it is the latest; the same
// last_failed changes nothing.
func (p *Persistence) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for _, m := range msgs {
		if m.ID == "" {
			return fmt.Errorf("mysql: store failed messages: %w: empty ID", bus.ErrInvalidMessage)
		}
	}
	// MySQL assigns left to right, each assignment seeing the ones before
	// it: every expression below reads the stored last_failed, which is
	// assigned last. VALUES(col) is the value the insert proposed.
	const differs = "VALUES(last_failed) <> last_failed"
	const newer = "VALUES(last_failed) > last_failed"
	sets := []string{
		"failures = IF(" + differs + ", failures + 1, failures)",
		"first_failed = IF(" + differs + ", LEAST(first_failed, VALUES(first_failed)), first_failed)",
	}
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, fmt.Sprintf("%[1]s = IF(%[2]s, VALUES(%[1]s), %[1]s)", c, newer))
	}
	sets = append(sets, "last_failed = GREATEST(last_failed, VALUES(last_failed))")
	upsert := "INSERT INTO " + p.n.failed + " (id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope)" +
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, " + atSQL + ", " + atSQL + ", ?) ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", ")
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		for _, m := range msgs {
			first, last := micros(m.FirstFailed), micros(m.LastFailed)
			if m.FirstFailed.IsZero() || first > last {
				first = last
			}
			env := m.Envelope
			if env == nil {
				env = []byte{}
			}
			if _, err := tx.ExecContext(ctx, upsert, []byte(m.ID), []byte(m.Type), []byte(m.Endpoint), []byte(m.Queue), []byte(m.Kind),
				cleanText(m.Reason, 1<<16-1), []byte(m.Group), m.Attempts, max(m.Failures, 1), first, last, env); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mysql: store failed messages: %w", err)
	}
	return nil
}

// failedWhere builds the conditions of q; paging only when page is set.
func failedWhere(q bus.FailedQuery, page bool) (string, []any) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"failure_group", q.Group}, {"message_type", q.Type}, {"endpoint", q.Endpoint}, {"id", q.Search}} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, []byte(c.v))
		}
	}
	if page && !q.BeforeFailed.IsZero() {
		where = append(where, "(last_failed < "+atSQL+" OR (last_failed = "+atSQL+" AND id < ?))")
		b := micros(q.BeforeFailed)
		args = append(args, b, b, []byte(q.BeforeID))
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
	rows, err := p.db.QueryContext(ctx, "SELECT "+p.failedColumns()+" FROM "+p.n.failed+where+
		" ORDER BY last_failed DESC, id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list failed: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.FailedMessage
	for rows.Next() {
		m, err := scanFailed(rows)
		if err != nil {
			return nil, fmt.Errorf("mysql: list failed: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: list failed: %w", err)
	}
	return out, nil
}

// CountFailed counts the messages q selects.
func (p *Persistence) CountFailed(ctx context.Context, q bus.FailedQuery) (int64, error) {
	where, args := failedWhere(q, false)
	var n int64
	if err := p.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+p.n.failed+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count failed: %w", err)
	}
	return n, nil
}

// GetFailed returns the message with the ID, by primary key.
func (p *Persistence) GetFailed(ctx context.Context, id string) (bus.FailedMessage, bool, error) {
	m, err := scanFailed(p.db.QueryRowContext(ctx, "SELECT "+p.failedColumns()+" FROM "+p.n.failed+" WHERE id = ?", []byte(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return bus.FailedMessage{}, false, nil
	}
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("mysql: get failed %s: %w", id, err)
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
	f := p.n.failed
	query := fmt.Sprintf(`SELECT g.failure_group, g.n, %s, %s, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, COUNT(*) AS n, MIN(first_failed) AS first_failed, MAX(last_failed) AS last_failed
      FROM %[3]s GROUP BY failure_group ORDER BY n DESC, last_failed DESC, failure_group LIMIT ?) AS g
JOIN %[3]s m ON m.id = (SELECT l.id FROM %[3]s l WHERE l.failure_group = g.failure_group ORDER BY l.last_failed DESC, l.id DESC LIMIT 1)
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, us("g.first_failed"), us("g.last_failed"), f)
	rows, err := p.db.QueryContext(ctx, query, limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: failed groups: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.FailedGroup
	for rows.Next() {
		var g bus.FailedGroup
		var group, typ, endpoint []byte
		var first, last int64
		if err := rows.Scan(&group, &g.Count, &first, &last, &typ, &endpoint, &g.Reason); err != nil {
			return nil, fmt.Errorf("mysql: failed groups: %w", err)
		}
		g.Group, g.Type, g.Endpoint = string(group), string(typ), string(endpoint)
		g.FirstFailed, g.LastFailed, g.Reason = fromMicros(first), fromMicros(last), bus.NormalizeReason(g.Reason)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: failed groups: %w", err)
	}
	return out, nil
}

// DeleteFailed deletes the messages with the IDs and returns how many it
// deleted.
func (p *Persistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	total := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), settleChunk)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = []byte(id)
		}
		n, err := execCount(ctx, p.db, "DELETE FROM "+p.n.failed+" WHERE id IN "+inList(len(chunk)), args...)
		if err != nil {
			return total, fmt.Errorf("mysql: delete failed: %w", err)
		}
		total += n
	}
	return total, ctx.Err()
}

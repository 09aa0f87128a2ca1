package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/postbus/bus"
)

var _ bus.ScheduledBrowser = (*Persistence)(nil)

// exactCountLimit is the backlog up to which StatsScheduled counts rows one
// by one; beyond it the count is the server's estimate.
const exactCountLimit = 100_000

func browseColumns() string {
	return "id, kind, message_type, envelope, " + us("due_at") + ", " + us("lease_until") + ", lease_token, failures, last_error, transport"
}

func scanBrowsed(r rowScanner) (bus.OutgoingMessage, error) {
	var m bus.OutgoingMessage
	var id, typ, token, tr []byte
	var kind, due int64
	var lease sql.NullInt64
	if err := r.Scan(&id, &kind, &typ, &m.Envelope, &due, &lease, &token, &m.Failures, &m.LastError, &tr); err != nil {
		return m, err
	}
	m.ID, m.Type, m.Transport = string(id), string(typ), string(tr)
	m.Kind, m.DueAt = bus.Kind(kind), fromMicros(due)
	if token != nil && lease.Valid {
		m.Token, m.LeaseUntil = string(token), fromMicros(lease.Int64)
	}
	return m, nil
}

// ListScheduled returns the rows q selects, earliest due first, then by
// ID: a range of the (due_at, id) index, or of the (message_type, due_at,
// id) index when q names a type, continued after (AfterDue, AfterID).
func (p *Persistence) ListScheduled(ctx context.Context, q bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	var where []string
	var args []any
	if q.Type != "" {
		where, args = append(where, "message_type = ?"), append(args, []byte(q.Type))
	}
	if !q.DueAfter.IsZero() {
		where, args = append(where, "due_at >= "+atSQL), append(args, micros(q.DueAfter))
	}
	if !q.DueBefore.IsZero() {
		where, args = append(where, "due_at < "+atSQL), append(args, micros(q.DueBefore))
	}
	if !q.AfterDue.IsZero() {
		a := micros(q.AfterDue)
		where = append(where, "(due_at > "+atSQL+" OR (due_at = "+atSQL+" AND id > ?))")
		args = append(args, a, a, []byte(q.AfterID))
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	query := "SELECT " + browseColumns() + " FROM " + p.n.table
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := p.db.QueryContext(ctx, query+" ORDER BY due_at, id LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list scheduled: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.OutgoingMessage
	for rows.Next() {
		m, err := scanBrowsed(rows)
		if err != nil {
			return nil, fmt.Errorf("mysql: list scheduled: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: list scheduled: %w", err)
	}
	return out, nil
}

// GetScheduled returns the row with the ID, by primary key.
func (p *Persistence) GetScheduled(ctx context.Context, id string) (bus.OutgoingMessage, bool, error) {
	m, err := scanBrowsed(p.db.QueryRowContext(ctx, "SELECT "+browseColumns()+" FROM "+p.n.table+" WHERE id = ?", []byte(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return bus.OutgoingMessage{}, false, nil
	}
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("mysql: get scheduled %s: %w", id, err)
	}
	return m, true, nil
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
	rows, err := p.db.QueryContext(ctx, "SELECT FLOOR((CAST("+us("due_at")+" AS DECIMAL(30,0)) - ?) * 1000 / ?), COUNT(*) FROM "+p.n.table+
		" WHERE due_at >= "+atSQL+" AND due_at < "+atSQL+" GROUP BY 1", from.UnixMicro(), int64(width), start, end)
	if err != nil {
		return nil, fmt.Errorf("mysql: due histogram: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := make([]int64, n)
	for rows.Next() {
		var b, c int64
		if err := rows.Scan(&b, &c); err != nil {
			return nil, fmt.Errorf("mysql: due histogram: %w", err)
		}
		if b >= 0 && b < int64(n) {
			out[b] += c
		}
	}
	if err := rows.Err(); err != nil {
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
		n, err = execCount(ctx, tx, "UPDATE "+p.n.table+
			" SET due_at = UTC_TIMESTAMP(6), available_at = UTC_TIMESTAMP(6), prior_available_at = NULL, lease_until = NULL, lease_token = NULL"+
			" WHERE id = ?", []byte(id))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mysql: send now %s: %w", id, err)
	}
	return n > 0, nil
}

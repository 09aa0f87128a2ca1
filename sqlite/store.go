package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/postbus/bus"
)

// StoreOutgoing inserts rows in one transaction. An ID that is already
// stored keeps its row (INSERT OR IGNORE), so a retried send cannot
// schedule twice.
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	created := nanos(time.Now())
	if len(msgs) == 1 { // the common single Send: one autocommit statement
		m := &msgs[0]
		due := nanos(m.DueAt)
		if _, err := p.db.ExecContext(ctx, p.q.insertOne, m.ID, int64(m.Kind), m.Envelope, due, due, created, int64(0)); err != nil {
			return fmt.Errorf("sqlite: store: %w", err)
		}
		return nil
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: store: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	args := make([]any, 0, 7*min(len(msgs), insertChunk))
	appendRow := func(m *bus.OutgoingMessage) {
		due := nanos(m.DueAt)
		args = append(args, m.ID, int64(m.Kind), m.Envelope, due, due, created, int64(0))
	}
	rest := msgs
	if len(msgs) >= insertChunk {
		stmt, err := tx.PrepareContext(ctx, p.q.insert)
		if err != nil {
			return fmt.Errorf("sqlite: store: %w", err)
		}
		defer func() { _ = stmt.Close() }()
		for len(rest) >= insertChunk {
			args = args[:0]
			for i := range insertChunk {
				appendRow(&rest[i])
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				return fmt.Errorf("sqlite: store: %w", err)
			}
			rest = rest[insertChunk:]
		}
	}
	for i := range rest {
		args = args[:0]
		appendRow(&rest[i])
		if _, err := tx.ExecContext(ctx, p.q.insertOne, args...); err != nil {
			return fmt.Errorf("sqlite: store: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: store: %w", err)
	}
	return nil
}

// ClaimDueOutgoing leases up to limit rows whose available time is at or
// before now, earliest first, until now+lease. The select and the lease run
// in one write transaction (BEGIN IMMEDIATE), and SQLite admits one writer
// per file at a time, across processes too, so no row is handed to two
// claimers. SQLite has no clock of its own apart from the process's, so
// times compare against the caller's now.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	n := nanos(now)
	until := nanos(now.Add(lease))
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	out, err := p.selectDue(ctx, tx, n, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	if len(out) == 0 {
		return nil, nil // the rollback ends the transaction; nothing changed
	}
	res, err := tx.ExecContext(ctx, p.q.leaseDue, n, limit, until)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	if got, err := res.RowsAffected(); err != nil || got != int64(len(out)) {
		return nil, fmt.Errorf("sqlite: claim: leased %d rows of %d selected: %v", got, len(out), err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	leaseUntil := fromNanos(until)
	for i := range out {
		out[i].LeaseUntil = leaseUntil
	}
	return out, nil
}

func (p *Persistence) selectDue(ctx context.Context, tx *sql.Tx, now int64, limit int) ([]bus.OutgoingMessage, error) {
	rows, err := tx.QueryContext(ctx, p.q.selectDue, now, limit)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := make([]bus.OutgoingMessage, 0, min(limit, 256))
	for rows.Next() {
		var (
			m         bus.OutgoingMessage
			kind, due int64
		)
		if err := rows.Scan(&m.ID, &kind, &m.Envelope, &due, &m.Failures, &m.LastError); err != nil {
			return nil, err
		}
		m.Kind, m.DueAt = bus.Kind(kind), fromNanos(due)
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeleteOutgoing removes rows in one statement; unknown IDs are ignored.
func (p *Persistence) DeleteOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	if _, err := p.db.ExecContext(ctx, p.q.deleteIDs, idList(ids)); err != nil {
		return fmt.Errorf("sqlite: delete: %w", err)
	}
	return nil
}

// ReleaseOutgoing makes claimed rows claimable again at once (from their
// due time), without counting a failure.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	if _, err := p.db.ExecContext(ctx, p.q.releaseIDs, idList(ids)); err != nil {
		return fmt.Errorf("sqlite: release: %w", err)
	}
	return nil
}

// RecordOutgoingFailures counts a failure on each row, keeps its error text
// and makes it claimable again at its RetryAt, all in one transaction.
// Unknown IDs are ignored.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) error {
	if len(failures) == 0 {
		return ctx.Err()
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: record failures: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, p.q.recordFail)
	if err != nil {
		return fmt.Errorf("sqlite: record failures: %w", err)
	}
	defer func() { _ = stmt.Close() }()
	for _, f := range failures {
		if _, err := stmt.ExecContext(ctx, f.Error, nanos(f.RetryAt), f.ID); err != nil {
			return fmt.Errorf("sqlite: record failures: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: record failures: %w", err)
	}
	return nil
}

// NextDueOutgoing returns when the earliest row becomes claimable, and
// false when the table is empty.
func (p *Persistence) NextDueOutgoing(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	if err := p.db.QueryRowContext(ctx, p.q.nextDue).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: next due: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromNanos(next.Int64), true, nil
}

// CancelOutgoing removes a row and reports whether it was there.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	res, err := p.db.ExecContext(ctx, p.q.cancelOne, id)
	if err != nil {
		return false, fmt.Errorf("sqlite: cancel: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: cancel: %w", err)
	}
	return n > 0, nil
}

// Len returns the number of stored rows, leased or not.
func (p *Persistence) Len(ctx context.Context) (int, error) {
	var n int
	if err := p.db.QueryRowContext(ctx, p.q.countRows).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	return n, nil
}

// idList encodes IDs as a JSON array for json_each, so a batch of any size
// is one statement with one parameter.
func idList(ids []string) string {
	b, _ := json.Marshal(ids) // a []string always marshals
	return string(b)
}

// nanos converts a time to the stored Unix nanoseconds. The zero time is 0;
// times outside what int64 nanoseconds can hold (before 1678 or after 2262)
// are clamped, which keeps their order.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Year() < 1678:
		return math.MinInt64
	case t.Year() > 2261:
		return math.MaxInt64
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos; 0 is the zero time.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// Schedules made at runtime (bus.RecurringRuntimeStore) are records with a
// spec. Their claim_at (due_at of a record with a spec, NULL otherwise) is
// indexed with the name: a claim is one ordered range scan of the records
// due, so its cost grows with them, not with the records stored, and
// declared schedules, whose due_at a claim never reads, are not in it.

// ClaimDueRecurring returns up to limit runtime records due at now,
// earliest due_at first (ties by name), and moves their due_at to now
// plus lease, in one READ COMMITTED transaction: the SELECT locks the
// records it returns with FOR UPDATE SKIP LOCKED, so concurrent claimers
// in any process skip each other's records instead of sharing or waiting
// for them. Times are the bus's (now), as every recurring time is.
func (p *Persistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	var out []bus.RecurringRecord
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, p.claimRecurringSelect(), micros(now), limit)
		if err != nil {
			return err
		}
		out, err = scanRecurrings(rows, out)
		if err != nil || len(out) == 0 {
			return err
		}
		args := []any{micros(now.Add(lease))}
		for _, r := range out {
			args = append(args, []byte(r.Name))
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+p.n.recurring+" SET due_at = "+atSQL+", revision = revision + 1,"+
			" updated_at = UTC_TIMESTAMP(6) WHERE name IN "+inList(len(out)), args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: claim due recurring: %w", err)
	}
	return out, nil
}

// claimRecurringSelect is the SELECT of ClaimDueRecurring, of now (in
// microseconds) and the limit: a range of claim_idx.
func (p *Persistence) claimRecurringSelect() string {
	return p.recurringSelect() + " WHERE claim_at <= " + atSQL + " AND spec IS NOT NULL AND fingerprint <> ''" +
		" ORDER BY claim_at, name LIMIT ? FOR UPDATE SKIP LOCKED"
}

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after, by name (byte order). The prefix is a
// range of the primary key, not a LIKE pattern: its _ and % are letters.
func (p *Persistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	q := p.recurringSelect() + " WHERE fingerprint <> '' AND name > ? AND name >= ?"
	args := []any{[]byte(after), []byte(prefix)}
	if end, ok := prefixEnd(prefix); ok {
		q += " AND name < ?"
		args = append(args, end)
	}
	rows, err := p.db.QueryContext(ctx, q+" ORDER BY name LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list recurring page: %w", err)
	}
	out, err := scanRecurrings(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("mysql: list recurring page: %w", err)
	}
	return out, nil
}

// prefixEnd returns the least byte string above every string that starts
// with prefix, and false when there is none (prefix is empty or all 0xFF).
func prefixEnd(prefix string) ([]byte, bool) {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1], true
		}
	}
	return nil, false
}

// scanRecurrings appends the records of rows to out, and closes rows.
func scanRecurrings(rows *sql.Rows, out []bus.RecurringRecord) ([]bus.RecurringRecord, error) {
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		r, err := scanRecurring(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// claimDueSQL selects the runtime records due at ?1, earliest first (ties
// by name), at most ?2: a range of the partial index on (due_at, name),
// read in order, so a claim reads the entries due and no others.
func (p *Persistence) claimDueSQL() string {
	return fmt.Sprintf(`SELECT %s FROM %s
WHERE spec IS NOT NULL AND due_at > 0 AND due_at <= ?1 AND fingerprint <> ''
ORDER BY due_at, name LIMIT ?2`, recurringColumns, p.recurringTable())
}

// ClaimDueRecurring returns up to limit runtime records due at now,
// earliest Due first, and moves their Due to now plus lease. The
// selection and the move are one write transaction, which SQLite lets one
// connection at a time hold on the file, so of several claimers, in one
// process or several, one gets each record. When nothing is due, as
// between ticks, it reads the index without taking the write lock.
func (p *Persistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	var due int
	err := p.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s
WHERE spec IS NOT NULL AND due_at > 0 AND due_at <= ?1 LIMIT 1)`, p.recurringTable()), nanos(now)).Scan(&due)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim due recurring: %w", err)
	}
	if due == 0 {
		return nil, nil
	}
	var out []bus.RecurringRecord
	err = p.inTx(ctx, func(tx *sql.Tx) error {
		out = nil
		recs, err := queryRecurring(ctx, tx, p.claimDueSQL(), nanos(now), limit)
		if err != nil || len(recs) == 0 {
			return err
		}
		names := make([]string, len(recs))
		for i, r := range recs {
			names[i] = r.Name
		}
		list, _ := json.Marshal(names) // a []string always marshals
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET due_at = ?1 WHERE name IN (SELECT value FROM json_each(?2))`,
			p.recurringTable()), nanos(now.Add(lease)), string(list)); err != nil {
			return err
		}
		out = recs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim due recurring: %w", err)
	}
	return out, nil
}

// listPageSQL selects the live records named with a prefix (?1 up to the
// bound ?4 when there is one) after ?2, by name, at most ?3: a range of the
// primary key. The prefix is a range, not a LIKE pattern, so its '%' and
// '_' are plain characters.
func (p *Persistence) listPageSQL(bounded bool) string {
	upper := ""
	if bounded {
		upper = " AND name < ?4"
	}
	return fmt.Sprintf(`SELECT %s FROM %s WHERE name >= ?1 AND name > ?2%s AND fingerprint <> '' ORDER BY name LIMIT ?3`,
		recurringColumns, p.recurringTable(), upper)
}

// prefixBound is the least string greater than every string that starts
// with prefix, in byte order, and false when there is none (the prefix
// is empty or all 0xFF bytes).
func prefixBound(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xFF {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after (byte order, as SQLite's BINARY collation
// compares TEXT), by name; deleted records are left out.
func (p *Persistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	args := []any{prefix, after, limit}
	upper, bounded := prefixBound(prefix)
	if bounded {
		args = append(args, upper)
	}
	recs, err := queryRecurring(ctx, p.db, p.listPageSQL(bounded), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list recurring page: %w", err)
	}
	return recs, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRecurring returns the records query selects (recurringColumns).
func queryRecurring(ctx context.Context, q queryer, query string, args ...any) ([]bus.RecurringRecord, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []bus.RecurringRecord
	for rows.Next() {
		r, err := scanRecurring(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

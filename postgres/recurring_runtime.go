package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
)

// ClaimDueRecurring returns up to limit runtime records (spec IS NOT NULL)
// whose due_at is not after now, earliest first, and moves their due_at to
// now plus lease, in one statement: the rows are picked through the
// partial due index and locked with FOR UPDATE SKIP LOCKED, so that racing
// claimers take disjoint records and none waits for another. A row a
// racing claim moved meanwhile is re-checked against due_at <= now and
// left out. The records returned carry the Due the claim replaced.
func (p *Persistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	rows, err := p.pool.Query(ctx, fmt.Sprintf(`UPDATE %[1]s AS r SET due_at = $2, updated_at = now()
FROM (SELECT name, due_at FROM %[1]s WHERE spec IS NOT NULL AND due_at <= $1
	ORDER BY due_at, name LIMIT $3 FOR UPDATE SKIP LOCKED) AS d
WHERE r.name = d.name
RETURNING r.name, r.fingerprint, r.schedule, r.generation, r.paused, r.last_tick, r.ticks, r.alive_until,
	r.spec, d.due_at, r.runs, r.skipped`, p.names.recur), now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due recurring: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.RecurringRecord, error) { return scanRecurring(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due recurring: %w", err)
	}
	slices.SortFunc(out, func(a, b bus.RecurringRecord) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after, by name (byte order: names are COLLATE
// "C"). The prefix is matched as a range of the primary key, name >=
// prefix AND name < the least string after every name with it, so it is
// literal (no LIKE wildcards) and reads only the page.
func (p *Persistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]bus.RecurringRecord, error) {
	if limit <= 0 || !storableText(prefix) {
		return nil, ctx.Err() // no stored name has a prefix that text cannot hold
	}
	lower, upper := prefix, prefixEnd(prefix)
	afterCond := `name > $2`
	args := []any{lower, after, upper, limit}
	if !storableText(after) {
		// Compare as bytes: from the longest prefix of after that text can
		// hold, the names above after.
		afterCond = `name >= $2 AND convert_to(name, 'UTF8') > $5`
		args[1], args = storablePrefix(after), append(args, []byte(after))
	}
	rows, err := p.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s
WHERE fingerprint <> '' AND name >= $1 AND ($3::text IS NULL OR name < $3) AND %s
ORDER BY name LIMIT $4`, recurringColumns, p.names.recur, afterCond), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list recurring page: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.RecurringRecord, error) { return scanRecurring(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list recurring page: %w", err)
	}
	return out, nil
}

// storableText reports whether PostgreSQL text can hold s: valid UTF-8
// with no NUL.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// storablePrefix is the longest prefix of s that text can hold.
func storablePrefix(s string) string {
	for i, r := range s {
		if r == 0 || (r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError))) {
			return s[:i]
		}
	}
	return s
}

// prefixEnd returns the least valid string that sorts after every string
// starting with prefix (UTF-8 byte order is code point order): prefix up
// to its last rune below utf8.MaxRune, that rune raised by one (past the
// surrogates). It is nil when there is none (no prefix, or only
// utf8.MaxRune), and then no upper bound applies.
func prefixEnd(prefix string) *string {
	runes := []rune(prefix)
	for i := len(runes) - 1; i >= 0; i-- {
		if runes[i] == utf8.MaxRune {
			continue
		}
		next := runes[i] + 1
		if next >= 0xD800 && next <= 0xDFFF {
			next = 0xE000
		}
		end := string(append(runes[:i:i], next))
		return &end
	}
	return nil
}

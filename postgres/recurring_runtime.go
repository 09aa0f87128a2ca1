package postgres

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// claimRecurringSQL claims the runtime records due at $1, at most $3,
// moving their due_at to $2, and returns them with the due_at it replaced,
// in one statement: the rows are picked through the partial due index and
// locked with FOR UPDATE SKIP LOCKED, so that racing claimers take
// disjoint records and none waits for another. The update finds its rows by = ANY(ARRAY(...)), probes of the primary
// key, as the outgoing claim does: joined to the picked rows (UPDATE ...
// FROM), the planner hashes them against a scan of the whole table.
func claimRecurringSQL(n names) string {
	return fmt.Sprintf(`WITH due AS (
	SELECT name, due_at FROM %[1]s
	WHERE spec IS NOT NULL AND due_at <= $1
	ORDER BY due_at, name
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE %[1]s AS r SET due_at = $2, updated_at = now()
	WHERE r.name = ANY(ARRAY(SELECT name FROM due))
	RETURNING r.name, r.fingerprint, r.schedule, r.generation, r.paused, r.last_tick, r.ticks, r.alive_until,
		r.spec, r.runs, r.skipped
)
SELECT c.name, c.fingerprint, c.schedule, c.generation, c.paused, c.last_tick, c.ticks, c.alive_until,
	c.spec, due.due_at, c.runs, c.skipped, c.spec IS NOT NULL
FROM claimed AS c JOIN due ON due.name = c.name`, n.recur)
}

// recurringPageSQL lists the records whose names pass cond, by name, at
// most $1. Every bound is in cond, none behind an OR, so that a generic
// plan reads the primary key from the first name of the page to the last.
func recurringPageSQL(n names, cond string) string {
	return fmt.Sprintf(`SELECT %s FROM %s
WHERE fingerprint <> '' AND %s
ORDER BY name LIMIT $1`, recurringColumns, n.recur, cond)
}

// recurringPage makes the page of records whose names start with prefix
// and sort after after, by name (byte order: names are COLLATE "C"), at
// most limit (sqlstore.RecurringHooks.Page). The prefix is matched as a
// range of the primary key, name >= prefix AND name < the least string
// after every name with it, so it is literal (no LIKE wildcards) and reads
// only the page. A prefix or an after that text cannot hold (cut UTF-8,
// NUL) is compared as bytes, within the range of its longest part that
// text can hold.
func recurringPage(n names) func(prefix, after string, limit int) (string, []any) {
	return func(prefix, after string, limit int) (string, []any) {
		var cond []string
		args := []any{limit}
		add := func(c string, v any) {
			args = append(args, v)
			cond = append(cond, fmt.Sprintf(c, len(args)))
		}
		text := storablePrefix(after)
		if text == after {
			add(`name > $%d`, after)
		} else {
			add(`name >= $%d`, text)
			add(`convert_to(name, 'UTF8') > $%d::bytea`, []byte(after))
		}
		text = storablePrefix(prefix)
		if text != "" {
			add(`name >= $%d`, text)
		}
		if end, ok := prefixEnd(text); ok {
			add(`name < $%d`, end)
		}
		if text != prefix {
			add(`substr(convert_to(name, 'UTF8'), 1, octet_length($%[1]d::bytea)) = $%[1]d::bytea`, []byte(prefix))
		}
		return recurringPageSQL(n, strings.Join(cond, " AND ")), args
	}
}

// storablePrefix is the longest prefix of s that PostgreSQL text can
// hold: valid UTF-8 with no NUL.
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
// surrogates). There is none (false) for an empty prefix or one of
// utf8.MaxRune only: then no upper bound applies.
func prefixEnd(prefix string) (string, bool) {
	runes := []rune(prefix)
	for i := len(runes) - 1; i >= 0; i-- {
		if runes[i] == utf8.MaxRune {
			continue
		}
		next := runes[i] + 1
		if next >= 0xD800 && next <= 0xDFFF {
			next = 0xE000
		}
		return string(append(runes[:i:i], next)), true
	}
	return "", false
}

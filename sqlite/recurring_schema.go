package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// recurringDDL is the table of recurring schedules (bus.RecurringStore),
// one row per schedule name: the current definition (fingerprint,
// schedule text, generation), paused (0 or 1), the time up to which its
// ticks are dealt with (last_tick, Unix nanoseconds, 0 before the first)
// its recent ticks as a JSON array of Unix nanoseconds, the liveness
// mark (alive_until, Unix nanoseconds, 0 before the first step: see
// bus.RecurringRecord.Alive), and for a schedule made at runtime its
// stored definition (spec, NULL for one declared in code), when its next
// step is due (due_at, Unix nanoseconds, 0: never) and its counts of runs
// and skipped ticks. The occurrences are ordinary rows of the
// scheduled-message table. A deleted schedule's row stays, with an empty
// fingerprint, so that its generation is never reused.
func recurringDDL(table string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	name        TEXT    NOT NULL PRIMARY KEY,
	fingerprint TEXT    NOT NULL,
	schedule    TEXT    NOT NULL,
	generation  INTEGER NOT NULL,
	paused      INTEGER NOT NULL DEFAULT 0,
	last_tick   INTEGER NOT NULL DEFAULT 0,
	ticks       TEXT    NOT NULL DEFAULT '[]',
	updated_at  INTEGER NOT NULL,
	alive_until INTEGER NOT NULL DEFAULT 0,
	spec        BLOB,
	due_at      INTEGER NOT NULL DEFAULT 0,
	runs        INTEGER NOT NULL DEFAULT 0,
	skipped     INTEGER NOT NULL DEFAULT 0
)`, table+"_recurring")
}

// runsDDL is the table of the recurring occurrences being handled
// (bus.RecurringRunGuard, for RecurringPolicy's OverlapSkip): one row per
// schedule with a run under way, the occurrence's message ID and the time
// (Unix nanoseconds) after which the run counts as finished.
func runsDDL(table string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_recurring_runs (
	name      TEXT    NOT NULL PRIMARY KEY,
	run_id    TEXT    NOT NULL,
	run_until INTEGER NOT NULL
)`, table)
}

// recurringIndexDDL is the index of the runtime records that have a next
// step (ClaimDueRecurring): partial, so declared schedules and runtime
// ones with nothing due are not in it, and a claim reads the due entries
// in order, whatever the number of records stored.
func recurringIndexDDL(table string) string {
	t := table + "_recurring"
	return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s_due_idx ON %s (due_at, name) WHERE spec IS NOT NULL AND due_at > 0`, t, t)
}

// recurringAddColumns are the columns that recurring tables made by
// earlier versions lack, in the order they came: existing records get no
// liveness mark (no step seen yet), no spec (declared in code), no due
// step and no runs or skipped ticks.
func recurringAddColumns(table string) []addColumn {
	t := table + "_recurring"
	return []addColumn{
		{"alive_until", "ALTER TABLE " + t + " ADD COLUMN alive_until INTEGER NOT NULL DEFAULT 0"},
		{"spec", "ALTER TABLE " + t + " ADD COLUMN spec BLOB"},
		{"due_at", "ALTER TABLE " + t + " ADD COLUMN due_at INTEGER NOT NULL DEFAULT 0"},
		{"runs", "ALTER TABLE " + t + " ADD COLUMN runs INTEGER NOT NULL DEFAULT 0"},
		{"skipped", "ALTER TABLE " + t + " ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0"},
	}
}

// migrateRecurring adds the columns that a recurring table made by an
// earlier version lacks, then creates the index of due runtime records
// (which needs them), inside Setup's write transaction.
func (p *Persistence) migrateRecurring(ctx context.Context, tx *sql.Tx) error {
	have, err := columnsOf(ctx, tx, p.q.columns, p.recurringTable())
	if err != nil {
		return err
	}
	for _, c := range recurringAddColumns(p.q.table) {
		if have[c.name] {
			continue
		}
		if _, err := tx.ExecContext(ctx, c.ddl); err != nil {
			return fmt.Errorf("add column %s: %w", c.name, err)
		}
		p.log.Info("sqlite: added a column to the recurring table", "table", p.recurringTable(), "column", c.name)
	}
	if _, err := tx.ExecContext(ctx, recurringIndexDDL(p.q.table)); err != nil {
		return fmt.Errorf("create the index of due runtime schedules: %w", err)
	}
	return nil
}

package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// recurrings is the kit's recurring-schedule store: its methods
// (DeclareRecurring, ClaimDueRecurring, BeginRecurringRun…) are
// Persistence's.
type recurrings = sqlstore.Recurrings

// recurringSuffix names the recurring-schedule table: <Table>_recurring.
const recurringSuffix = "_recurring"

// recurringDueSuffix names the index of the runtime schedules' due times:
// <Table>_recur_due_idx, short enough for the longest table name.
const recurringDueSuffix = "_recur_due_idx"

// recurringDDL is the table of recurring schedules (bus.RecurringStore),
// one row per schedule name: the current definition (fingerprint,
// schedule text, generation), whether it is paused, the time up to which
// its ticks are dealt with (last_tick, NULL before the first), the
// recent ticks whose occurrences may still be stored, and the liveness
// mark (alive_until, NULL before the first step: see
// bus.RecurringRecord.Alive). A schedule made at runtime also has its
// definition (spec, NULL for one declared in code) and the time its next
// step is due (due_at, NULL: never), and counts its occurrences (runs)
// and the ticks its policies skipped (skipped). A deleted schedule's row
// stays, with an empty fingerprint, so that its generation is never
// reused. The occurrences themselves are ordinary rows of the
// scheduled-message table.
func recurringDDL(n names) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	name        text          COLLATE "C" PRIMARY KEY,
	fingerprint text          NOT NULL,
	schedule    text          NOT NULL,
	generation  bigint        NOT NULL,
	paused      boolean       NOT NULL DEFAULT false,
	last_tick   timestamptz,
	ticks       timestamptz[] NOT NULL DEFAULT '{}',
	updated_at  timestamptz   NOT NULL DEFAULT now(),
	alive_until timestamptz,
	spec        bytea,
	due_at      timestamptz,
	runs        bigint        NOT NULL DEFAULT 0,
	skipped     bigint        NOT NULL DEFAULT 0
)`, n.recur)
}

// recurringMigrateDDL adds the liveness mark and the runtime columns to a
// recurring table made by an earlier version (NULL or 0: no step seen
// yet, declared in code). All are metadata-only changes.
func recurringMigrateDDL(n names) string {
	return fmt.Sprintf(`ALTER TABLE %s
	ADD COLUMN IF NOT EXISTS alive_until timestamptz,
	ADD COLUMN IF NOT EXISTS spec        bytea,
	ADD COLUMN IF NOT EXISTS due_at      timestamptz,
	ADD COLUMN IF NOT EXISTS runs        bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS skipped     bigint NOT NULL DEFAULT 0`, n.recur)
}

// recurringDueDDL is the index of ClaimDueRecurring: only runtime
// schedules (spec IS NOT NULL) are in it, in the order they fall due, so
// a claim reads the records due and no others.
func recurringDueDDL(n names) string {
	return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due_at, name) WHERE spec IS NOT NULL`, n.recurDue, n.recur)
}

// runsSuffix names the table of the recurring runs under way: <Table>_runs.
const runsSuffix = "_runs"

// runsDDL is the table of the recurring occurrences being handled
// (bus.RecurringRunGuard, for RecurringPolicy's OverlapSkip): one row per
// schedule with a run under way, the occurrence's message ID and when the
// run counts as finished.
func runsDDL(n names) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	name      text        COLLATE "C" PRIMARY KEY,
	run_id    text        COLLATE "C" NOT NULL,
	run_until timestamptz NOT NULL
)`, n.runs)
}

// RecurringTable returns the quoted, schema-qualified table of recurring
// schedules: Options.Table + "_recurring".
func (p *Persistence) RecurringTable() string { return p.names.recur }

// recurringColumns are the columns of a record (sqlstore.RecurringSQL).
const recurringColumns = `name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until, spec, due_at, runs, skipped,
	spec IS NOT NULL`

// newRecurrings returns the recurring store of p: times as timestamptz
// (NULL for none), ticks as a timestamptz[]. A step's inserts notify
// dispatchers as StoreOutgoing's do, and its cancels skip the rows a claim
// holds.
func (p *Persistence) newRecurrings() *recurrings {
	cancel := fmt.Sprintf(`DELETE FROM %s WHERE %s`, p.names.table, notHeld(p.names.table, "id = ANY($1::text[])"))
	return sqlstore.NewRecurrings(p.dialect, newKitDB(p.pool), recurringSQL(p.names), sqlstore.RecurringHooks{
		Check: func(rows []bus.OutgoingMessage) error {
			for i := range rows {
				if err := checkRow(&rows[i]); err != nil {
					return err
				}
			}
			return nil
		},
		Write: func(ctx context.Context, tx sqlstore.Tx, ids []string, rows []bus.OutgoingMessage) error {
			if len(ids) > 0 {
				if _, err := tx.Exec(ctx, cancel, ids); err != nil {
					return err
				}
			}
			if len(rows) == 0 {
				return nil
			}
			return p.insertOn(ctx, tx.(kitTx).tx, rows, true) // a transaction of newKitDB's
		},
		Ticks: pgTicks{},
		Page:  recurringPage(p.names),
	})
}

// recurringSQL are the statements of the recurring store. A step's
// compare-and-set update comes first in its transaction, so racing steps
// queue on the record's row lock and all but one find it changed.
func recurringSQL(n names) sqlstore.RecurringSQL {
	t := n.recur
	sel := `SELECT ` + recurringColumns + ` FROM ` + t
	return sqlstore.RecurringSQL{
		Load:   sel + ` WHERE name = $1 AND fingerprint <> ''`,
		List:   sel + ` WHERE fingerprint <> '' ORDER BY name`,
		Lock:   `SELECT fingerprint FROM ` + t + ` WHERE name = $1 FOR UPDATE`,
		Insert: `INSERT INTO ` + t + ` (name, fingerprint, schedule, generation, spec, due_at) VALUES ($1, $2, $3, 1, $4, $5)`,
		Replace: `UPDATE ` + t + ` SET fingerprint = $1, schedule = $2, spec = $3, due_at = $4, generation = generation + 1,
	updated_at = now() WHERE name = $5`,
		Advance: `UPDATE ` + t + ` SET last_tick = $1, ticks = $2, alive_until = greatest(alive_until, $3), due_at = $4, runs = $5,
	skipped = $6, updated_at = now()
WHERE name = $7 AND generation = $8 AND last_tick IS NOT DISTINCT FROM $9 AND fingerprint = $10 AND paused = $11`,
		SetPaused: `UPDATE ` + t + ` SET paused = $1, due_at = $2, updated_at = now(),
	last_tick = CASE WHEN NOT $1 AND (last_tick IS NULL OR last_tick < $2) THEN $2 ELSE last_tick END
WHERE name = $3 AND fingerprint <> ''`,
		Delete: `UPDATE ` + t + ` SET fingerprint = '', schedule = '', paused = false, last_tick = NULL, ticks = '{}', alive_until = NULL,
	spec = NULL, due_at = NULL, runs = 0, skipped = 0, updated_at = now()
WHERE name = $1 AND fingerprint <> ''`,
		Claim: claimRecurringSQL(n),
		RunBegin: `INSERT INTO ` + n.runs + ` AS r (name, run_id, run_until) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET run_id = EXCLUDED.run_id, run_until = EXCLUDED.run_until
WHERE r.run_id = EXCLUDED.run_id OR r.run_until <= $4`,
		RunEnd: `DELETE FROM ` + n.runs + ` WHERE name = $1 AND run_id = $2`,
	}
}

// pgTicks carries a record's Ticks as a timestamptz[].
type pgTicks struct{}

func (pgTicks) Arg(ticks []time.Time) any {
	if ticks == nil {
		return []time.Time{}
	}
	return ticks
}

func (pgTicks) Scan(src any) ([]time.Time, error) {
	list, ok := src.([]any)
	if !ok && src != nil {
		return nil, fmt.Errorf("ticks as %T", src)
	}
	var out []time.Time
	for _, v := range list {
		t, ok := v.(time.Time)
		if !ok {
			return nil, fmt.Errorf("a tick as %T", v)
		}
		out = append(out, t.UTC())
	}
	return out, nil
}

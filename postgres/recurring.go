package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
)

var (
	_ bus.RecurringStore        = (*Persistence)(nil)
	_ bus.RecurringRuntimeStore = (*Persistence)(nil)
)

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

// RecurringTable returns the quoted, schema-qualified table of recurring
// schedules: Options.Table + "_recurring".
func (p *Persistence) RecurringTable() string { return p.names.recur }

const recurringColumns = `name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until, spec, due_at, runs, skipped`

func scanRecurring(row pgx.Row) (bus.RecurringRecord, error) {
	var r bus.RecurringRecord
	var last, alive, due *time.Time
	if err := row.Scan(&r.Name, &r.Fingerprint, &r.Schedule, &r.Generation, &r.Paused, &last, &r.Ticks, &alive,
		&r.Spec, &due, &r.Runs, &r.Skipped); err != nil {
		return bus.RecurringRecord{}, err
	}
	if last != nil {
		r.Last = last.UTC()
	}
	if alive != nil {
		r.Alive = alive.UTC()
	}
	if due != nil {
		r.Due = due.UTC()
	}
	if len(r.Ticks) == 0 {
		r.Ticks = nil
	}
	for i := range r.Ticks {
		r.Ticks[i] = r.Ticks[i].UTC()
	}
	return r, nil
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// DeclareRecurring inserts the schedule's record, or replaces its
// definition when the fingerprint differs, raising the generation, in one
// statement (see bus.RecurringStore).
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	t := p.names.recur
	got, err := scanRecurring(p.pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS r (name, fingerprint, schedule, generation, spec, due_at)
VALUES ($1, $2, $3, 1, $4, $5)
ON CONFLICT (name) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, schedule = EXCLUDED.schedule,
	spec = EXCLUDED.spec, due_at = EXCLUDED.due_at, generation = r.generation + 1, updated_at = now()
WHERE r.fingerprint <> EXCLUDED.fingerprint
RETURNING %[2]s`, t, recurringColumns), rec.Name, rec.Fingerprint, rec.Schedule, rec.Spec, nullTime(rec.Due)))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return bus.RecurringRecord{}, false, fmt.Errorf("postgres: declare recurring %q: %w", rec.Name, err)
	}
	got, ok, err := p.LoadRecurring(ctx, rec.Name)
	if err == nil && !ok {
		err = errors.New("the record was deleted meanwhile")
	}
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("postgres: declare recurring %q: %w", rec.Name, err)
	}
	return got, false, nil
}

// LoadRecurring returns the record name.
func (p *Persistence) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	r, err := scanRecurring(p.pool.QueryRow(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE name = $1 AND fingerprint <> ''`, recurringColumns, p.names.recur), name))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return bus.RecurringRecord{}, false, nil
	case err != nil:
		return bus.RecurringRecord{}, false, fmt.Errorf("postgres: load recurring %q: %w", name, err)
	}
	return r, true, nil
}

// ListRecurring returns every record, by name.
func (p *Persistence) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	rows, err := p.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE fingerprint <> '' ORDER BY name`, recurringColumns, p.names.recur))
	if err != nil {
		return nil, fmt.Errorf("postgres: list recurring: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bus.RecurringRecord, error) { return scanRecurring(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list recurring: %w", err)
	}
	return out, nil
}

// AdvanceRecurring applies adv in one transaction: the compare-and-set
// update of the record first (so that racing steps queue on its row lock
// and all but one find it changed), then the cancellations (rows whose
// lease runs on the server's clock are kept), then the inserts, which
// notify dispatchers like StoreOutgoing.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	for i := range adv.Store {
		if err := checkRow(&adv.Store[i]); err != nil {
			return false, err
		}
	}
	ticks := adv.Ticks
	if ticks == nil {
		ticks = []time.Time{}
	}
	var done bool
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET last_tick = $4, ticks = $5, updated_at = now(),
	alive_until = greatest(alive_until, $6), due_at = $9, runs = $10, skipped = $11
WHERE name = $1 AND generation = $2 AND last_tick IS NOT DISTINCT FROM $3 AND fingerprint = $7 AND paused = $8`, p.names.recur),
			adv.Name, adv.Generation, nullTime(adv.From), nullTime(adv.Last), ticks, nullTime(adv.Alive), adv.Fingerprint, adv.Paused,
			nullTime(adv.Due), adv.Runs, adv.Skipped)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if len(adv.Cancel) > 0 {
			if _, err := tx.Exec(ctx, p.cancelManySQL(), adv.Cancel); err != nil {
				return err
			}
		}
		if len(adv.Store) > 0 {
			if err := p.insertOn(ctx, tx, adv.Store, true); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: advance recurring %q: %w", adv.Name, err)
	}
	return done, nil
}

// cancelManySQL deletes the rows named in $1 that no claim holds,
// skipping (not waiting for) the held ones.
func (p *Persistence) cancelManySQL() string {
	return fmt.Sprintf(`DELETE FROM %s WHERE %s`, p.names.table, notHeld(p.names.table, "id = ANY($1::text[])"))
}

// SetRecurringPaused pauses or resumes the record name; resuming moves
// last_tick forward to at. Both make the record due at at.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	tag, err := p.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET paused = $2, updated_at = now(), due_at = $4,
	last_tick = CASE WHEN NOT $2 AND (last_tick IS NULL OR last_tick < $3) THEN $3 ELSE last_tick END
WHERE name = $1 AND fingerprint <> ''`, p.names.recur), name, paused, at, nullTime(at))
	if err != nil {
		return false, fmt.Errorf("postgres: pause recurring %q: %w", name, err)
	}
	return tag.RowsAffected() > 0, nil
}

// DeleteRecurring removes the record name, leaving a tombstone (an empty
// fingerprint) that keeps its generation, and cancels the rows named, in
// one transaction.
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET fingerprint = '', schedule = '', paused = false,
	last_tick = NULL, ticks = '{}', alive_until = NULL, spec = NULL, due_at = NULL, runs = 0, skipped = 0, updated_at = now()
WHERE name = $1 AND fingerprint <> ''`, p.names.recur), name)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if len(cancel) > 0 {
			if _, err := tx.Exec(ctx, p.cancelManySQL(), cancel); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: delete recurring %q: %w", name, err)
	}
	return done, nil
}

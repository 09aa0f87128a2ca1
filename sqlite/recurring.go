package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

var _ bus.RecurringStore = (*Persistence)(nil)

// recurringTable is the table of recurring schedules: Options.Table +
// "_recurring".
func (p *Persistence) recurringTable() string { return p.q.table + "_recurring" }

// recurringDDL is the table of recurring schedules (bus.RecurringStore),
// one row per schedule name: the current definition (fingerprint,
// schedule text, generation), paused (0 or 1), the time up to which its
// ticks are dealt with (last_tick, Unix nanoseconds, 0 before the first)
// its recent ticks as a JSON array of Unix nanoseconds, and the liveness
// mark (alive_until, Unix nanoseconds, 0 before the first step: see
// bus.RecurringRecord.Alive). The occurrences are ordinary rows of the
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
	alive_until INTEGER NOT NULL DEFAULT 0
)`, table+"_recurring")
}

// migrateRecurring adds the liveness mark to a recurring table made by an
// earlier version (0: no step seen yet), inside Setup's write transaction.
func (p *Persistence) migrateRecurring(ctx context.Context, tx *sql.Tx) error {
	have, err := columnsOf(ctx, tx, p.q.columns, p.recurringTable())
	if err != nil {
		return err
	}
	if have["alive_until"] {
		return nil
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN alive_until INTEGER NOT NULL DEFAULT 0`, p.recurringTable())); err != nil {
		return fmt.Errorf("add column alive_until: %w", err)
	}
	p.log.Info("sqlite: added a column to the recurring table", "table", p.recurringTable(), "column", "alive_until")
	return nil
}

const recurringColumns = `name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until`

type rowScanner interface{ Scan(dest ...any) error }

func scanRecurring(row rowScanner) (bus.RecurringRecord, error) {
	var r bus.RecurringRecord
	var last, alive int64
	var ticks string
	if err := row.Scan(&r.Name, &r.Fingerprint, &r.Schedule, &r.Generation, &r.Paused, &last, &ticks, &alive); err != nil {
		return bus.RecurringRecord{}, err
	}
	r.Last, r.Alive = fromNanos(last), fromNanos(alive)
	var ns []int64
	if err := json.Unmarshal([]byte(ticks), &ns); err != nil {
		return bus.RecurringRecord{}, fmt.Errorf("ticks of %q: %w", r.Name, err)
	}
	for _, n := range ns {
		r.Ticks = append(r.Ticks, fromNanos(n))
	}
	return r, nil
}

func ticksJSON(ticks []time.Time) string {
	ns := make([]int64, len(ticks))
	for i, t := range ticks {
		ns[i] = nanos(t)
	}
	b, _ := json.Marshal(ns) // an []int64 always marshals
	return string(b)
}

// DeclareRecurring inserts the schedule's record, or replaces its
// definition when the fingerprint differs, raising the generation, in one
// write transaction (see bus.RecurringStore).
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	var got bus.RecurringRecord
	var changed bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s AS r (name, fingerprint, schedule, generation, updated_at)
VALUES (?1, ?2, ?3, 1, ?4)
ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint, schedule = excluded.schedule,
	generation = r.generation + 1, updated_at = excluded.updated_at
WHERE r.fingerprint <> excluded.fingerprint`, p.recurringTable()), rec.Name, rec.Fingerprint, rec.Schedule, nanos(p.now()))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n > 0
		got, err = scanRecurring(tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE name = ?1`, recurringColumns, p.recurringTable()), rec.Name))
		return err
	})
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("sqlite: declare recurring %q: %w", rec.Name, err)
	}
	return got, changed, nil
}

// inTx runs fn in one write transaction and commits it.
func (p *Persistence) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// LoadRecurring returns the record name.
func (p *Persistence) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	r, err := scanRecurring(p.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE name = ?1 AND fingerprint <> ''`, recurringColumns, p.recurringTable()), name))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return bus.RecurringRecord{}, false, nil
	case err != nil:
		return bus.RecurringRecord{}, false, fmt.Errorf("sqlite: load recurring %q: %w", name, err)
	}
	return r, true, nil
}

// ListRecurring returns every record, by name.
func (p *Persistence) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	rows, err := p.db.QueryContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE fingerprint <> '' ORDER BY name`, recurringColumns, p.recurringTable()))
	if err != nil {
		return nil, fmt.Errorf("sqlite: list recurring: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []bus.RecurringRecord
	for rows.Next() {
		r, err := scanRecurring(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list recurring: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list recurring: %w", err)
	}
	return out, nil
}

// AdvanceRecurring applies adv in one write transaction: the
// compare-and-set update of the record, the cancellations (rows whose
// lease runs at the store's now are kept), then the inserts.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if err := checkRows(adv.Store); err != nil {
		return false, err
	}
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		now := p.now()
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET last_tick = ?4, ticks = ?5, updated_at = ?6,
	alive_until = max(alive_until, ?7)
WHERE name = ?1 AND generation = ?2 AND last_tick = ?3 AND fingerprint = ?8 AND paused = ?9`, p.recurringTable()),
			adv.Name, adv.Generation, nanos(adv.From), nanos(adv.Last), ticksJSON(adv.Ticks), nanos(now), nanos(adv.Alive),
			adv.Fingerprint, adv.Paused)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		if err := p.cancelIn(ctx, tx, adv.Cancel, now); err != nil {
			return err
		}
		if len(adv.Store) > 0 {
			if err := p.insertRows(ctx, tx, adv.Store, now); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: advance recurring %q: %w", adv.Name, err)
	}
	return done, nil
}

// cancelIn deletes the rows named that no running lease holds, in tx.
func (p *Persistence) cancelIn(ctx context.Context, tx *sql.Tx, ids []string, now time.Time) error {
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, p.q.cancelOne, id, nanos(now)); err != nil {
			return err
		}
	}
	return nil
}

// SetRecurringPaused pauses or resumes the record name; resuming moves
// last_tick forward to at.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	res, err := p.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET paused = ?2, updated_at = ?4,
	last_tick = CASE WHEN NOT ?2 AND last_tick < ?3 THEN ?3 ELSE last_tick END
WHERE name = ?1 AND fingerprint <> ''`, p.recurringTable()), name, paused, nanos(at), nanos(p.now()))
	if err != nil {
		return false, fmt.Errorf("sqlite: pause recurring %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: pause recurring %q: %w", name, err)
	}
	return n > 0, nil
}

// DeleteRecurring removes the record name, leaving a tombstone (an empty
// fingerprint) that keeps its generation, and cancels the rows named, in
// one write transaction.
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET fingerprint = '', schedule = '', paused = 0,
	last_tick = 0, ticks = '[]', alive_until = 0, updated_at = ?2
WHERE name = ?1 AND fingerprint <> ''`, p.recurringTable()), name, nanos(p.now()))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		done = true
		return p.cancelIn(ctx, tx, cancel, p.now())
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: delete recurring %q: %w", name, err)
	}
	return done, nil
}

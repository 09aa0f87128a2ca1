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

var (
	_ bus.RecurringStore        = (*Persistence)(nil)
	_ bus.RecurringRuntimeStore = (*Persistence)(nil)
)

// recurringTable is the table of recurring schedules: Options.Table +
// "_recurring".
func (p *Persistence) recurringTable() string { return p.q.table + "_recurring" }

// recurringColumns are the columns scanRecurring reads; the last says
// whether spec is set, so that an empty Spec stays non-nil.
const recurringColumns = `name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until,
	spec, due_at, runs, skipped, spec IS NOT NULL`

type rowScanner interface{ Scan(dest ...any) error }

func scanRecurring(row rowScanner) (bus.RecurringRecord, error) {
	var r bus.RecurringRecord
	var last, alive, due int64
	var ticks string
	var hasSpec bool
	if err := row.Scan(&r.Name, &r.Fingerprint, &r.Schedule, &r.Generation, &r.Paused, &last, &ticks, &alive,
		&r.Spec, &due, &r.Runs, &r.Skipped, &hasSpec); err != nil {
		return bus.RecurringRecord{}, err
	}
	r.Last, r.Alive, r.Due = fromNanos(last), fromNanos(alive), fromNanos(due)
	if hasSpec && r.Spec == nil {
		r.Spec = []byte{}
	}
	var ns []int64
	if err := json.Unmarshal([]byte(ticks), &ns); err != nil {
		return bus.RecurringRecord{}, fmt.Errorf("ticks of %q: %w", r.Name, err)
	}
	for _, n := range ns {
		r.Ticks = append(r.Ticks, fromNanos(n))
	}
	return r, nil
}

// specArg is a record's Spec as a statement argument: NULL for none (a
// schedule declared in code), a BLOB otherwise, even an empty one (the
// driver binds every []byte, nil included, as a BLOB).
func specArg(spec []byte) any {
	if spec == nil {
		return nil
	}
	return spec
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
// definition (fingerprint, schedule text, spec and due step) when the
// fingerprint differs, raising the generation, in one write transaction
// (see bus.RecurringStore).
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	var got bus.RecurringRecord
	var changed bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s AS r (name, fingerprint, schedule, generation, updated_at, spec, due_at)
VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6)
ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint, schedule = excluded.schedule,
	generation = r.generation + 1, updated_at = excluded.updated_at, spec = excluded.spec, due_at = excluded.due_at
WHERE r.fingerprint <> excluded.fingerprint`, p.recurringTable()),
			rec.Name, rec.Fingerprint, rec.Schedule, nanos(p.now()), specArg(rec.Spec), nanos(rec.Due))
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
// compare-and-set update of the record (with its due step, runs and
// skipped ticks), the cancellations (rows whose
// lease runs at the store's now are kept), then the inserts.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if err := checkRows(adv.Store); err != nil {
		return false, err
	}
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		now := p.now()
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET last_tick = ?4, ticks = ?5, updated_at = ?6,
	alive_until = max(alive_until, ?7), due_at = ?10, runs = ?11, skipped = ?12
WHERE name = ?1 AND generation = ?2 AND last_tick = ?3 AND fingerprint = ?8 AND paused = ?9`, p.recurringTable()),
			adv.Name, adv.Generation, nanos(adv.From), nanos(adv.Last), ticksJSON(adv.Ticks), nanos(now), nanos(adv.Alive),
			adv.Fingerprint, adv.Paused, nanos(adv.Due), adv.Runs, adv.Skipped)
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

// SetRecurringPaused pauses or resumes the record name and makes its
// next step due at at; resuming moves last_tick forward to at.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	res, err := p.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET paused = ?2, updated_at = ?4, due_at = ?3,
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
// fingerprint, no spec, nothing due, no runs or skipped ticks) that
// keeps its generation, and cancels the rows named, in
// one write transaction.
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET fingerprint = '', schedule = '', paused = 0,
	last_tick = 0, ticks = '[]', alive_until = 0, spec = NULL, due_at = 0, runs = 0, skipped = 0, updated_at = ?2
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

package mysql

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

// The table of recurring schedules (Options.Table + "_recurring") has one
// row per schedule name: the current definition (fingerprint, schedule
// text, generation), paused, the time up to which its ticks are dealt
// with (last_tick, NULL before the first), its recent ticks as a JSON
// array of microseconds since the epoch, its liveness mark (alive_until,
// NULL before the first step: see bus.RecurringRecord.Alive), a revision
// raised by every change, so that the affected-row count of an update is
// its matched count whatever the DSN's clientFoundRows says, and the
// columns of runtime schedules (spec, due_at, runs, skipped: see
// runtimeColumns). The occurrences are ordinary rows of the
// scheduled-message table.

func (p *Persistence) recurringSelect() string {
	return "SELECT name, fingerprint, schedule, generation, paused, " + us("last_tick") + ", ticks, " + us("alive_until") + ", spec, " +
		us("due_at") + ", runs, skipped FROM " + p.n.recurring
}

type rowScanner interface{ Scan(dest ...any) error }

func scanRecurring(row rowScanner) (bus.RecurringRecord, error) {
	var r bus.RecurringRecord
	var name, fp, ticks []byte
	var last, alive, due sql.NullInt64
	if err := row.Scan(&name, &fp, &r.Schedule, &r.Generation, &r.Paused, &last, &ticks, &alive,
		&r.Spec, &due, &r.Runs, &r.Skipped); err != nil {
		return bus.RecurringRecord{}, err
	}
	r.Name, r.Fingerprint = string(name), string(fp)
	if last.Valid {
		r.Last = fromMicros(last.Int64)
	}
	if alive.Valid {
		r.Alive = fromMicros(alive.Int64)
	}
	if due.Valid {
		r.Due = fromMicros(due.Int64)
	}
	var ns []int64
	if err := json.Unmarshal(ticks, &ns); err != nil {
		return bus.RecurringRecord{}, fmt.Errorf("ticks of %q: %w", r.Name, err)
	}
	for _, n := range ns {
		r.Ticks = append(r.Ticks, fromMicros(n))
	}
	return r, nil
}

func ticksJSON(ticks []time.Time) []byte {
	ns := make([]int64, len(ticks))
	for i, t := range ticks {
		ns[i] = micros(t)
	}
	b, _ := json.Marshal(ns) // an []int64 always marshals
	return b
}

// lastTick is the parameter of a last_tick, alive_until or due_at: NULL
// for the zero time.
func lastTick(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// DeclareRecurring inserts the schedule's record, or replaces its
// definition when the fingerprint differs, raising the generation, in one
// transaction (see bus.RecurringStore). It locks the row first (SELECT
// ... FOR UPDATE), so racing declarations of a name queue on it instead of
// upgrading a shared lock, which InnoDB answers with deadlocks; of two
// that insert a new name at once, one does and the other, refused with a
// duplicate key, starts again and finds the row.
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	var got bus.RecurringRecord
	var changed bool
	var err error
	for range declareAttempts {
		err = p.inTx(ctx, func(tx *sql.Tx) error {
			var fp []byte
			err := tx.QueryRowContext(ctx, "SELECT fingerprint FROM "+p.n.recurring+" WHERE name = ? FOR UPDATE", []byte(rec.Name)).Scan(&fp)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				_, err = tx.ExecContext(ctx, "INSERT INTO "+p.n.recurring+
					" (name, fingerprint, schedule, generation, ticks, spec, due_at, updated_at)"+
					" VALUES (?, ?, ?, 1, '[]', ?, "+atSQL+", UTC_TIMESTAMP(6))",
					[]byte(rec.Name), []byte(rec.Fingerprint), cleanText(rec.Schedule, 1<<16), specParam(rec.Spec), lastTick(rec.Due))
				if err != nil {
					return err
				}
				changed = true
			case err != nil:
				return err
			case string(fp) != rec.Fingerprint:
				_, err = tx.ExecContext(ctx, "UPDATE "+p.n.recurring+
					" SET fingerprint = ?, schedule = ?, spec = ?, due_at = "+atSQL+", generation = generation + 1,"+
					" revision = revision + 1, updated_at = UTC_TIMESTAMP(6) WHERE name = ?",
					[]byte(rec.Fingerprint), cleanText(rec.Schedule, 1<<16), specParam(rec.Spec), lastTick(rec.Due), []byte(rec.Name))
				if err != nil {
					return err
				}
				changed = true
			default:
				changed = false
			}
			got, err = scanRecurring(tx.QueryRowContext(ctx, p.recurringSelect()+" WHERE name = ?", []byte(rec.Name)))
			return err
		})
		if !isDuplicate(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("mysql: declare recurring %q: %w", rec.Name, err)
	}
	return got, changed, nil
}

// declareAttempts bounds the attempts of a declaration whose insert of a
// new name lost to another's.
const declareAttempts = 5

// LoadRecurring returns the record name.
func (p *Persistence) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	r, err := scanRecurring(p.db.QueryRowContext(ctx, p.recurringSelect()+" WHERE name = ? AND fingerprint <> ''", []byte(name)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return bus.RecurringRecord{}, false, nil
	case err != nil:
		return bus.RecurringRecord{}, false, fmt.Errorf("mysql: load recurring %q: %w", name, err)
	}
	return r, true, nil
}

// ListRecurring returns every record, by name.
func (p *Persistence) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	rows, err := p.db.QueryContext(ctx, p.recurringSelect()+" WHERE fingerprint <> '' ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("mysql: list recurring: %w", err)
	}
	out, err := scanRecurrings(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("mysql: list recurring: %w", err)
	}
	return out, nil
}

// AdvanceRecurring applies adv in one transaction: the compare-and-set
// update of the record, the cancellations (rows a claim holds are
// kept), then the inserts.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	if err := checkRows(adv.Store); err != nil {
		return false, err
	}
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		// The liveness mark only moves forward; a zero adv.Alive leaves it.
		alive := lastTick(adv.Alive)
		n, err := execCount(ctx, tx, "UPDATE "+p.n.recurring+" SET last_tick = "+at("?")+", ticks = ?,"+
			" alive_until = CASE WHEN ? IS NULL OR (alive_until IS NOT NULL AND alive_until >= "+at("?")+")"+
			" THEN alive_until ELSE "+at("?")+" END, due_at = "+atSQL+", runs = ?, skipped = ?, revision = revision + 1,"+
			" updated_at = UTC_TIMESTAMP(6) WHERE name = ? AND generation = ? AND last_tick <=> "+at("?")+
			" AND fingerprint = ? AND paused = ?",
			lastTick(adv.Last), ticksJSON(adv.Ticks), alive, alive, alive, lastTick(adv.Due), adv.Runs, adv.Skipped,
			[]byte(adv.Name), adv.Generation, lastTick(adv.From),
			[]byte(adv.Fingerprint), adv.Paused)
		if err != nil || n == 0 {
			return err
		}
		if err := p.cancelIn(ctx, tx, adv.Cancel); err != nil {
			return err
		}
		if len(adv.Store) > 0 {
			if err := p.insertRows(ctx, tx, adv.Store); err != nil {
				return err
			}
		}
		done = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("mysql: advance recurring %q: %w", adv.Name, err)
	}
	return done, nil
}

// cancelIn deletes the rows named that no claim holds, in tx, without
// waiting for a held row (see CancelOutgoing).
func (p *Persistence) cancelIn(ctx context.Context, tx *sql.Tx, ids []string) error {
	for _, id := range ids {
		if _, err := p.cancelIn1(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// SetRecurringPaused pauses or resumes the record name; resuming moves
// last_tick forward to at. Both set due_at to at.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	// MySQL assigns left to right: last_tick is computed before paused
	// changes, on the stored value.
	n, err := execCount(ctx, p.db, "UPDATE "+p.n.recurring+
		" SET last_tick = IF(NOT ? AND (last_tick IS NULL OR last_tick < "+atSQL+"), "+atSQL+", last_tick),"+
		" paused = ?, due_at = "+atSQL+", revision = revision + 1, updated_at = UTC_TIMESTAMP(6) WHERE name = ? AND fingerprint <> ''",
		paused, micros(at), micros(at), paused, micros(at), []byte(name))
	if err != nil {
		return false, fmt.Errorf("mysql: pause recurring %q: %w", name, err)
	}
	return n > 0, nil
}

// specParam is the parameter of a spec: NULL for a schedule declared in
// code.
func specParam(spec []byte) any {
	if spec == nil {
		return nil
	}
	return spec
}

// atSQL is at of one parameter.
var atSQL = at("?")

// DeleteRecurring removes the record name, leaving a tombstone (an empty
// fingerprint, no spec, due_at or counts) that keeps its generation, and
// cancels the rows named, in one transaction.
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	var done bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		n, err := execCount(ctx, tx, "UPDATE "+p.n.recurring+" SET fingerprint = '', schedule = '', paused = false,"+
			" last_tick = NULL, ticks = '[]', alive_until = NULL, spec = NULL, due_at = NULL, runs = 0, skipped = 0,"+
			" revision = revision + 1, updated_at = UTC_TIMESTAMP(6)"+
			" WHERE name = ? AND fingerprint <> ''", []byte(name))
		if err != nil || n == 0 {
			return err
		}
		done = true
		return p.cancelIn(ctx, tx, cancel)
	})
	if err != nil {
		return false, fmt.Errorf("mysql: delete recurring %q: %w", name, err)
	}
	return done, nil
}

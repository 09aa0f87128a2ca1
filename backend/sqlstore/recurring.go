package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus/backend"
)

// Recurrings is the recurring-schedule store: backend.RecurringStore,
// backend.RecurringRuntimeStore and the run guard of RecurringPolicy's
// OverlapSkip (BeginRecurringRun, EndRecurringRun), over a dialect's
// RecurringSQL. A store embeds it, and its methods are the store's.
//
// A schedule's record is one row of the recurring table; its occurrences
// are ordinary rows of the scheduled-message table, which the store's
// RecurringHooks cancel and store in a step's transaction. A deleted
// record stays as a tombstone, its fingerprint empty, so that its
// generation is never reused; the statements that read records leave
// tombstones out.
//
// Every call runs on the store's own connections, never in the
// transaction ctx carries: the bus refuses a recurring call with such a
// ctx (bus.ErrCannotJoinTx) before it reaches the store, since a step's
// effects must not follow a caller's commit or rollback, and on a pool of
// one connection (SQLite) the call would wait for ever for the one the
// transaction holds.
type Recurrings struct {
	d     *Dialect
	db    DB
	sql   RecurringSQL
	hooks RecurringHooks
	ticks TickCodec
}

// NewRecurrings returns the recurring store of d on db.
func NewRecurrings(d *Dialect, db DB, s RecurringSQL, h RecurringHooks) *Recurrings {
	r := &Recurrings{d: d, db: db, sql: s, hooks: h, ticks: h.Ticks}
	if r.ticks == nil {
		r.ticks = jsonTicks{d.Times}
	}
	return r
}

// recurringDeclareAttempts bounds the attempts of a declaration whose
// insert of a new name lost to another's.
const recurringDeclareAttempts = 5

// DeclareRecurring inserts the schedule's record, or replaces its
// definition when the fingerprint differs, raising the generation, in one
// transaction (see backend.RecurringStore). It locks the row first, so
// racing declarations of a name queue on it; of two that insert a new
// name at once, one does and the other, refused with a unique-key
// violation, starts again and finds the row.
func (r *Recurrings) DeclareRecurring(ctx context.Context, rec backend.RecurringRecord) (backend.RecurringRecord, bool, error) {
	var got backend.RecurringRecord
	var changed bool
	var err error
	for range recurringDeclareAttempts {
		err = r.inTx(ctx, func(tx Tx) error {
			var fp string
			err := tx.QueryRow(ctx, r.sql.Lock, r.d.T(rec.Name)).Scan(&fp)
			switch changed = true; {
			case errors.Is(err, sql.ErrNoRows):
				_, err = tx.Exec(ctx, r.sql.Insert, r.d.T(rec.Name), r.d.T(rec.Fingerprint), r.schedule(rec.Schedule),
					specArg(rec.Spec), r.time(rec.Due))
			case err == nil && fp != rec.Fingerprint:
				_, err = tx.Exec(ctx, r.sql.Replace, r.d.T(rec.Fingerprint), r.schedule(rec.Schedule), specArg(rec.Spec),
					r.time(rec.Due), r.d.T(rec.Name))
			default:
				changed = false
			}
			if err != nil {
				return err
			}
			got, err = r.scan(tx.QueryRow(ctx, r.sql.Load, r.d.T(rec.Name)))
			return err
		})
		if !r.d.Unique(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return backend.RecurringRecord{}, false, r.d.Errorf("declare recurring %q: %w", rec.Name, err)
	}
	return got, changed, nil
}

// LoadRecurring returns the record name.
func (r *Recurrings) LoadRecurring(ctx context.Context, name string) (backend.RecurringRecord, bool, error) {
	rec, err := r.scan(r.db.QueryRow(ctx, r.sql.Load, r.d.T(name)))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.RecurringRecord{}, false, nil
	case err != nil:
		return backend.RecurringRecord{}, false, r.d.Errorf("load recurring %q: %w", name, err)
	}
	return rec, true, nil
}

// ListRecurring returns every record, by name.
func (r *Recurrings) ListRecurring(ctx context.Context) ([]backend.RecurringRecord, error) {
	recs, err := r.query(ctx, r.db, r.sql.List)
	if err != nil {
		return nil, r.d.Errorf("list recurring: %w", err)
	}
	return recs, nil
}

// AdvanceRecurring applies adv in one transaction: the compare-and-set
// update of the record first (so that racing steps queue on its row and
// all but one find it changed), then the cancellations (rows a claim
// holds are kept), then the inserts.
func (r *Recurrings) AdvanceRecurring(ctx context.Context, adv backend.RecurringAdvance) (bool, error) {
	if r.hooks.Check != nil {
		if err := r.hooks.Check(adv.Store); err != nil {
			return false, err
		}
	}
	var done bool
	err := r.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, r.sql.Advance, r.time(adv.Last), r.ticks.Arg(adv.Ticks), r.time(adv.Alive), r.time(adv.Due),
			adv.Runs, adv.Skipped, r.d.T(adv.Name), adv.Generation, r.time(adv.From), r.d.T(adv.Fingerprint), adv.Paused)
		if done = err == nil && n > 0; !done {
			return err
		}
		return r.write(ctx, tx, adv.Cancel, adv.Store)
	})
	if err != nil {
		return false, r.d.Errorf("advance recurring %q: %w", adv.Name, err)
	}
	return done, nil
}

// SetRecurringPaused pauses or resumes the record name and makes its next
// step due at at; resuming moves last_tick forward to at.
func (r *Recurrings) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	n, err := r.db.Exec(ctx, r.sql.SetPaused, paused, r.time(at), r.d.T(name))
	if err != nil {
		return false, r.d.Errorf("pause recurring %q: %w", name, err)
	}
	return n > 0, nil
}

// DeleteRecurring removes the record name, leaving a tombstone that keeps
// its generation, and cancels the rows named, in one transaction.
func (r *Recurrings) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	var done bool
	err := r.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, r.sql.Delete, r.d.T(name))
		if done = err == nil && n > 0; !done {
			return err
		}
		return r.write(ctx, tx, cancel, nil)
	})
	if err != nil {
		return false, r.d.Errorf("delete recurring %q: %w", name, err)
	}
	return done, nil
}

// write cancels and stores occurrences in tx (RecurringHooks.Write).
func (r *Recurrings) write(ctx context.Context, tx Tx, cancel []string, rows []backend.OutgoingMessage) error {
	if len(cancel) == 0 && len(rows) == 0 {
		return nil
	}
	return r.hooks.Write(ctx, tx, cancel, rows)
}

// inTx runs fn in a transaction of the store's own (InTx).
func (r *Recurrings) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return InTx(ctx, r.d, r.db, fn)
}

// time is the parameter of a nullable time column.
func (r *Recurrings) time(t time.Time) any {
	if t.IsZero() && r.hooks.NullZero {
		return nil
	}
	return r.d.Times.Arg(t)
}

func (r *Recurrings) schedule(s string) any {
	if r.hooks.Schedule == nil {
		return s
	}
	return r.hooks.Schedule(s)
}

// specArg is a Spec as a parameter: NULL for none (a schedule declared in
// code), bytes otherwise, even empty ones.
func specArg(spec []byte) any {
	if spec == nil {
		return nil
	}
	return spec
}

// scan reads a record (the columns of RecurringSQL).
func (r *Recurrings) scan(row Row) (backend.RecurringRecord, error) {
	var rec backend.RecurringRecord
	var last, ticks, alive, due any
	var hasSpec bool
	if err := row.Scan(&rec.Name, &rec.Fingerprint, &rec.Schedule, &rec.Generation, &rec.Paused, &last, &ticks, &alive,
		&rec.Spec, &due, &rec.Runs, &rec.Skipped, &hasSpec); err != nil {
		return backend.RecurringRecord{}, err
	}
	var errs [4]error
	rec.Last, errs[0] = r.d.Times.Scan(last)
	rec.Alive, errs[1] = r.d.Times.Scan(alive)
	rec.Due, errs[2] = r.d.Times.Scan(due)
	rec.Ticks, errs[3] = r.ticks.Scan(ticks)
	if err := errors.Join(errs[:]...); err != nil {
		return backend.RecurringRecord{}, fmt.Errorf("record %q: %w", rec.Name, err)
	}
	if hasSpec && rec.Spec == nil {
		rec.Spec = []byte{}
	}
	return rec, nil
}

// query returns the records stmt selects.
func (r *Recurrings) query(ctx context.Context, q Querier, stmt string, args ...any) ([]backend.RecurringRecord, error) {
	rows, err := q.Query(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []backend.RecurringRecord
	for rows.Next() {
		rec, err := r.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// jsonTicks is the TickCodec of a JSON array of a UnixTimes codec's
// integers.
type jsonTicks struct{ times TimeCodec }

func (j jsonTicks) Arg(ticks []time.Time) any {
	ns := make([]any, len(ticks))
	for i, t := range ticks {
		ns[i] = j.times.Arg(t)
	}
	b, _ := json.Marshal(ns) // integers always marshal
	return string(b)
}

func (j jsonTicks) Scan(src any) ([]time.Time, error) {
	var text []byte
	switch v := src.(type) {
	case string:
		text = []byte(v)
	case []byte:
		text = v
	default:
		return nil, fmt.Errorf("ticks as %T", src)
	}
	var ns []int64
	if err := json.Unmarshal(text, &ns); err != nil {
		return nil, fmt.Errorf("ticks: %w", err)
	}
	var out []time.Time
	for _, n := range ns {
		t, err := j.times.Scan(n)
		if err != nil {
			return nil, fmt.Errorf("ticks: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

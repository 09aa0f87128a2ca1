package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/postbus/bus/backend"
)

// SagaSQL is the SQL of a saga store, on a table with one row per (saga,
// correlation): the instance's ID, its state (the saga's JSON bytes
// exactly), its pending timeouts and its version. No write raises an
// error on a conflict where the database would abort the transaction it
// runs in: a conflict changes no row, or (MySQL) fails its statement only.
type SagaSQL struct {
	// Table is the saga table's name, as SagaTable returns it.
	Table string
	// Load takes saga, correlation; it returns id, state, timeouts,
	// version.
	Load string
	// Insert takes saga, correlation, id, state, timeouts (and the time,
	// with Now) and stores the instance at version 1. An existing key
	// changes no row (ON CONFLICT DO NOTHING) or is a unique-key
	// violation (Dialect.IsUnique).
	Insert string
	// Update takes state, timeouts, saga, correlation, version (and the
	// time, with Now): it stores the state and timeouts at version + 1
	// where the version is the one given. Its affected rows are the rows
	// it matched (the version always changes).
	Update string
	// Delete takes saga, correlation, version: it deletes the row at that
	// version.
	Delete string
	// Now, if set, is the store's clock: Insert and Update take its time
	// (Dialect.Times) as their last parameter. Nil: they read the server's.
	Now func() time.Time
	// ArrayTimeouts says the timeouts column is an array of text that the
	// client takes and returns as a []string (PostgreSQL's text[]).
	// Otherwise it is a JSON array of strings in a text column.
	ArrayTimeouts bool
}

// Sagas is the saga store (backend.SagaStore's methods) of a SQL store.
// Every method runs in the transaction ctx carries (Dialect.TxFrom: the
// outbox handling's, or the caller's), if any, and otherwise on the
// store's pool.
type Sagas struct {
	d   *Dialect
	db  Querier
	sql SagaSQL
}

// NewSagas returns the saga store of the statements s on db.
func NewSagas(d *Dialect, db Querier, s SagaSQL) *Sagas {
	return &Sagas{d: d, db: db, sql: s}
}

// SagaTable returns the name of the saga table.
func (s *Sagas) SagaTable() string { return s.sql.Table }

// LoadSaga returns the instance of saga with the correlation value, and
// false when there is none. It reads in the transaction ctx carries, if
// any.
func (s *Sagas) LoadSaga(ctx context.Context, saga, correlation string) (backend.SagaInstance, bool, error) {
	inst := backend.SagaInstance{Saga: saga, Correlation: correlation}
	var state, timeouts []byte
	var tdest any = &timeouts
	if s.sql.ArrayTimeouts {
		tdest = &inst.Timeouts
	}
	err := s.d.On(ctx, s.db).QueryRow(ctx, s.sql.Load, s.d.T(saga), s.d.T(correlation)).Scan(&inst.ID, &state, tdest, &inst.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.SagaInstance{}, false, nil
	}
	if err != nil {
		return backend.SagaInstance{}, false, s.d.Errorf("load saga %s %q: %w", saga, correlation, err)
	}
	if !s.sql.ArrayTimeouts {
		if err := json.Unmarshal(timeouts, &inst.Timeouts); err != nil {
			return backend.SagaInstance{}, false, s.d.Errorf("load saga %s %q: timeouts: %w", saga, correlation, err)
		}
	}
	if len(inst.Timeouts) == 0 {
		inst.Timeouts = nil
	}
	inst.State = state
	if inst.State == nil {
		inst.State = []byte{}
	}
	return inst, true, nil
}

// InsertSaga stores inst at version 1, in the transaction ctx carries if
// any. When an instance of its saga and correlation exists it stores
// nothing and returns an error wrapping backend.ErrSagaConflict; the
// transaction stays usable.
func (s *Sagas) InsertSaga(ctx context.Context, inst backend.SagaInstance) error {
	ts, err := s.timeouts(inst.Timeouts)
	if err == nil {
		err = s.write(ctx, true, s.sql.Insert, s.d.T(inst.Saga), s.d.T(inst.Correlation), s.d.T(inst.ID), s.d.T(string(inst.State)), ts)
	}
	if err != nil {
		return s.d.Errorf("insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	return nil
}

// UpdateSaga replaces the state and timeouts of the instance stored at
// inst.Version and stores version inst.Version+1, in the transaction ctx
// carries if any. Another stored version, or no instance, is an error
// wrapping backend.ErrSagaConflict, and the transaction stays usable.
func (s *Sagas) UpdateSaga(ctx context.Context, inst backend.SagaInstance) error {
	ts, err := s.timeouts(inst.Timeouts)
	if err == nil {
		err = s.write(ctx, false, s.sql.Update, s.d.T(string(inst.State)), ts, s.d.T(inst.Saga), s.d.T(inst.Correlation), inst.Version)
	}
	if err != nil {
		return s.d.Errorf("update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, err)
	}
	return nil
}

// DeleteSaga removes the instance if its stored version is version, in
// the transaction ctx carries if any; otherwise it returns an error
// wrapping backend.ErrSagaConflict, and the transaction stays usable.
func (s *Sagas) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	n, err := s.d.On(ctx, s.db).Exec(ctx, s.sql.Delete, s.d.T(saga), s.d.T(correlation), version)
	if err := sagaConflict(n, err); err != nil {
		return s.d.Errorf("delete saga %s %q at version %d: %w", saga, correlation, version, err)
	}
	return nil
}

// timeouts is the timeouts parameter, as the column takes it.
func (s *Sagas) timeouts(ts []string) (any, error) {
	switch {
	case s.sql.ArrayTimeouts && ts == nil:
		return []string{}, nil // a nil slice would be NULL
	case s.sql.ArrayTimeouts:
		return ts, nil
	case len(ts) == 0:
		return s.d.T("[]"), nil
	}
	b, err := json.Marshal(ts)
	return s.d.T(string(b)), err
}

// write runs Insert or Update, the time appended with Now. A unique-key
// violation of Insert is a conflict.
func (s *Sagas) write(ctx context.Context, insert bool, stmt string, args ...any) error {
	if s.sql.Now != nil {
		args = append(args, s.d.Times.Arg(s.sql.Now()))
	}
	n, err := s.d.On(ctx, s.db).Exec(ctx, stmt, args...)
	if insert && s.d.Unique(err) {
		return backend.ErrSagaConflict
	}
	return sagaConflict(n, err)
}

// sagaConflict returns err, or backend.ErrSagaConflict when the write changed
// no row.
func sagaConflict(n int64, err error) error {
	if err == nil && n == 0 {
		return backend.ErrSagaConflict
	}
	return err
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/postbus/bus"
)

// sagaQueries is the SQL of the saga store on the saga table
// (Options.Table + "_sagas"): one row per (saga, correlation), the state
// as TEXT holding the saga's JSON bytes exactly (json_extract reads it),
// the pending timeouts as a JSON array of message IDs, and the version.
// Times are Unix nanoseconds, as in the other tables.
type sagaQueries struct {
	table, create, load, insert, update, delete string
}

func newSagaQueries(t string) sagaQueries {
	return sagaQueries{
		table: t,
		create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	saga        TEXT    NOT NULL,
	correlation TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	timeouts    TEXT    NOT NULL DEFAULT '[]',
	version     INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (saga, correlation)
)`, t),
		load: "SELECT id, state, timeouts, version FROM " + t + " WHERE saga = ?1 AND correlation = ?2",
		// DO NOTHING on the key only: any other constraint failure is an
		// error, unlike INSERT OR IGNORE.
		insert: "INSERT INTO " + t + " (saga, correlation, id, state, timeouts, version, created_at, updated_at)" +
			" VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6) ON CONFLICT (saga, correlation) DO NOTHING",
		update: "UPDATE " + t + " SET state = ?4, timeouts = ?5, version = version + 1, updated_at = ?6" +
			" WHERE saga = ?1 AND correlation = ?2 AND version = ?3",
		delete: "DELETE FROM " + t + " WHERE saga = ?1 AND correlation = ?2 AND version = ?3",
	}
}

// sagaDB is what the saga statements run on: the store's handle, or the
// transaction ctx carries.
type sagaDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// on returns the transaction ctx carries (Tx: the outbox handling's, or the
// caller's from WithTx), and otherwise the store's handle. Inside a
// handling it must be the transaction: it holds the store's only
// connection.
func (p *Persistence) on(ctx context.Context) sagaDB {
	if tx, ok := Tx(ctx); ok {
		return tx
	}
	return p.db
}

// LoadSaga returns the instance of saga with the correlation value, and
// false when there is none. It reads in the transaction ctx carries (Tx),
// if any.
func (p *Persistence) LoadSaga(ctx context.Context, saga, correlation string) (bus.SagaInstance, bool, error) {
	inst := bus.SagaInstance{Saga: saga, Correlation: correlation}
	var state, timeouts []byte
	err := p.on(ctx).QueryRowContext(ctx, p.q.sagas.load, saga, correlation).Scan(&inst.ID, &state, &timeouts, &inst.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return bus.SagaInstance{}, false, nil
	}
	if err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("sqlite: load saga %s %q: %w", saga, correlation, err)
	}
	if err := json.Unmarshal(timeouts, &inst.Timeouts); err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("sqlite: load saga %s %q: timeouts: %w", saga, correlation, err)
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
// nothing and returns an error wrapping bus.ErrSagaConflict; the
// transaction stays usable.
func (p *Persistence) InsertSaga(ctx context.Context, inst bus.SagaInstance) error {
	timeouts, err := timeoutsJSON(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("sqlite: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	res, err := p.on(ctx).ExecContext(ctx, p.q.sagas.insert, inst.Saga, inst.Correlation, inst.ID,
		string(inst.State), timeouts, nanos(p.now()))
	if err := sagaWritten(res, err); err != nil {
		return fmt.Errorf("sqlite: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	return nil
}

// UpdateSaga replaces the state and timeouts of the instance stored at
// inst.Version and stores version inst.Version+1, in the transaction ctx
// carries if any. Another stored version, or no instance, is an error
// wrapping bus.ErrSagaConflict, and the transaction stays usable.
func (p *Persistence) UpdateSaga(ctx context.Context, inst bus.SagaInstance) error {
	timeouts, err := timeoutsJSON(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("sqlite: update saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	res, err := p.on(ctx).ExecContext(ctx, p.q.sagas.update, inst.Saga, inst.Correlation, inst.Version,
		string(inst.State), timeouts, nanos(p.now()))
	if err := sagaWritten(res, err); err != nil {
		return fmt.Errorf("sqlite: update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, err)
	}
	return nil
}

// DeleteSaga removes the instance if its stored version is version, in the
// transaction ctx carries if any; otherwise it returns an error wrapping
// bus.ErrSagaConflict, and the transaction stays usable.
func (p *Persistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	res, err := p.on(ctx).ExecContext(ctx, p.q.sagas.delete, saga, correlation, version)
	if err := sagaWritten(res, err); err != nil {
		return fmt.Errorf("sqlite: delete saga %s %q at version %d: %w", saga, correlation, version, err)
	}
	return nil
}

// sagaWritten returns err, or bus.ErrSagaConflict when the statement
// changed no row.
func sagaWritten(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return bus.ErrSagaConflict
	}
	return nil
}

func timeoutsJSON(ts []string) (string, error) {
	if len(ts) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(ts)
	return string(b), err
}

// SagaTable returns the name of the saga table.
func (p *Persistence) SagaTable() string { return p.q.sagas.table }

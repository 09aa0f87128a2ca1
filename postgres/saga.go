package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
)

// querier is what the saga statements run on: the pool, or the transaction
// ctx carries.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// on returns the transaction ctx carries, the outbox handling's (Tx) or the
// caller's (WithTx), and otherwise the pool.
func (p *Persistence) on(ctx context.Context) querier {
	if tx, ok := txFrom(ctx); ok {
		return tx
	}
	return p.pool
}

// sagaStatements is the SQL of the saga store, on the saga table. Inserts
// use ON CONFLICT DO NOTHING and every write reports its affected rows, so
// a conflict never raises an error that would abort the transaction the
// statement runs in.
type sagaStatements struct {
	load, insert, update, delete string
}

func newSagaStatements(n names) sagaStatements {
	t := n.sagas
	return sagaStatements{
		load: fmt.Sprintf(`SELECT id, state, timeouts, version FROM %s WHERE saga = $1 AND correlation = $2`, t),
		insert: fmt.Sprintf(`INSERT INTO %s (saga, correlation, id, state, timeouts, version)
VALUES ($1, $2, $3, $4::json, $5::text[], 1)
ON CONFLICT (saga, correlation) DO NOTHING`, t),
		update: fmt.Sprintf(`UPDATE %s SET state = $4::json, timeouts = $5::text[], version = version + 1, updated_at = now()
WHERE saga = $1 AND correlation = $2 AND version = $3`, t),
		delete: fmt.Sprintf(`DELETE FROM %s WHERE saga = $1 AND correlation = $2 AND version = $3`, t),
	}
}

// SagaTable returns the quoted, schema-qualified saga table name.
func (p *Persistence) SagaTable() string { return p.names.sagas }

// LoadSaga returns the instance of saga with the correlation value, and
// false when there is none. It reads in the transaction ctx carries (Tx,
// WithTx), if any, and otherwise on the pool.
func (p *Persistence) LoadSaga(ctx context.Context, saga, correlation string) (bus.SagaInstance, bool, error) {
	inst := bus.SagaInstance{Saga: saga, Correlation: correlation}
	var state []byte
	err := p.on(ctx).QueryRow(ctx, p.sagaSQL.load, saga, correlation).Scan(&inst.ID, &state, &inst.Timeouts, &inst.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return bus.SagaInstance{}, false, nil
	}
	if err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("postgres: load saga %s %q: %w", saga, correlation, err)
	}
	inst.State = state
	if len(inst.Timeouts) == 0 {
		inst.Timeouts = nil
	}
	return inst, true, nil
}

// InsertSaga stores inst at version 1, in the transaction ctx carries if
// any. When an instance of its saga and correlation exists it stores
// nothing and returns an error wrapping bus.ErrSagaConflict; the
// transaction stays usable. inst.State must be JSON (the column is json).
func (p *Persistence) InsertSaga(ctx context.Context, inst bus.SagaInstance) error {
	tag, err := p.on(ctx).Exec(ctx, p.sagaSQL.insert, inst.Saga, inst.Correlation, inst.ID, string(inst.State), timeoutsArg(inst.Timeouts))
	if err != nil {
		return fmt.Errorf("postgres: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: insert saga %s %q: %w", inst.Saga, inst.Correlation, bus.ErrSagaConflict)
	}
	return nil
}

// UpdateSaga replaces the state and timeouts of the instance stored at
// inst.Version and stores version inst.Version+1, in the transaction ctx
// carries if any. Another stored version, or no instance, is an error
// wrapping bus.ErrSagaConflict, and the transaction stays usable.
func (p *Persistence) UpdateSaga(ctx context.Context, inst bus.SagaInstance) error {
	tag, err := p.on(ctx).Exec(ctx, p.sagaSQL.update, inst.Saga, inst.Correlation, inst.Version,
		string(inst.State), timeoutsArg(inst.Timeouts))
	if err != nil {
		return fmt.Errorf("postgres: update saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, bus.ErrSagaConflict)
	}
	return nil
}

// DeleteSaga removes the instance if its stored version is version, in the
// transaction ctx carries if any; otherwise it returns an error wrapping
// bus.ErrSagaConflict, and the transaction stays usable.
func (p *Persistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	tag, err := p.on(ctx).Exec(ctx, p.sagaSQL.delete, saga, correlation, version)
	if err != nil {
		return fmt.Errorf("postgres: delete saga %s %q: %w", saga, correlation, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: delete saga %s %q at version %d: %w", saga, correlation, version, bus.ErrSagaConflict)
	}
	return nil
}

// timeoutsArg is never nil: pgx sends a nil slice as NULL.
func timeoutsArg(ts []string) []string {
	if ts == nil {
		return []string{}
	}
	return ts
}

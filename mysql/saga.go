package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/postbus/bus"
)

// The saga table (Options.Table + "_sagas") has one row per (saga,
// correlation): the state as the saga's JSON bytes exactly (LONGBLOB),
// the pending timeouts as a JSON array of message IDs, and the version.

// on returns the transaction ctx carries (Tx: the outbox handling's, or
// the caller's from WithTx), and otherwise the store's handle.
func (p *Persistence) on(ctx context.Context) execer {
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
	var id, state, timeouts []byte
	err := p.on(ctx).QueryRowContext(ctx, "SELECT id, state, timeouts, version FROM "+p.n.sagas+
		" WHERE saga = ? AND correlation = ?", []byte(saga), []byte(correlation)).Scan(&id, &state, &timeouts, &inst.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return bus.SagaInstance{}, false, nil
	}
	if err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("mysql: load saga %s %q: %w", saga, correlation, err)
	}
	if err := json.Unmarshal(timeouts, &inst.Timeouts); err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("mysql: load saga %s %q: timeouts: %w", saga, correlation, err)
	}
	if len(inst.Timeouts) == 0 {
		inst.Timeouts = nil
	}
	inst.ID, inst.State = string(id), state
	if inst.State == nil {
		inst.State = []byte{}
	}
	return inst, true, nil
}

// InsertSaga stores inst at version 1, in the transaction ctx carries if
// any. When an instance of its saga and correlation exists it stores
// nothing and returns an error wrapping bus.ErrSagaConflict; the
// transaction stays usable (a duplicate key fails only its statement).
func (p *Persistence) InsertSaga(ctx context.Context, inst bus.SagaInstance) error {
	timeouts, err := timeoutsJSON(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("mysql: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	_, err = p.on(ctx).ExecContext(ctx, "INSERT INTO "+p.n.sagas+
		" (saga, correlation, id, state, timeouts, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
		[]byte(inst.Saga), []byte(inst.Correlation), []byte(inst.ID), stateBytes(inst.State), timeouts)
	if isDuplicate(err) {
		err = bus.ErrSagaConflict
	}
	if err != nil {
		return fmt.Errorf("mysql: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	return nil
}

// UpdateSaga replaces the state and timeouts of the instance stored at
// inst.Version and stores version inst.Version+1, in the transaction ctx
// carries if any. Another stored version, or no instance, is an error
// wrapping bus.ErrSagaConflict.
func (p *Persistence) UpdateSaga(ctx context.Context, inst bus.SagaInstance) error {
	timeouts, err := timeoutsJSON(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("mysql: update saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	// version always changes, so the affected-row count is the matched
	// count whatever the DSN's clientFoundRows says.
	n, err := execCount(ctx, p.on(ctx), "UPDATE "+p.n.sagas+
		" SET state = ?, timeouts = ?, version = version + 1, updated_at = UTC_TIMESTAMP(6) WHERE saga = ? AND correlation = ? AND version = ?",
		stateBytes(inst.State), timeouts, []byte(inst.Saga), []byte(inst.Correlation), inst.Version)
	if err == nil && n == 0 {
		err = bus.ErrSagaConflict
	}
	if err != nil {
		return fmt.Errorf("mysql: update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, err)
	}
	return nil
}

// DeleteSaga removes the instance if its stored version is version, in
// the transaction ctx carries if any; otherwise it returns an error
// wrapping bus.ErrSagaConflict.
func (p *Persistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	n, err := execCount(ctx, p.on(ctx), "DELETE FROM "+p.n.sagas+" WHERE saga = ? AND correlation = ? AND version = ?",
		[]byte(saga), []byte(correlation), version)
	if err == nil && n == 0 {
		err = bus.ErrSagaConflict
	}
	if err != nil {
		return fmt.Errorf("mysql: delete saga %s %q at version %d: %w", saga, correlation, version, err)
	}
	return nil
}

func stateBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func timeoutsJSON(ts []string) ([]byte, error) {
	if len(ts) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(ts)
}

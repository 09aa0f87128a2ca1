package backend

import (
	"context"
	"errors"
)

// ErrSagaConflict is returned by a SagaStore when a write lost a race: an
// insert found the instance already stored, or an update or delete found a
// version other than the one it read (or no instance). The bus then runs
// the handler again on fresh state, without counting a retry.
var ErrSagaConflict = errors.New("bus: saga instance changed concurrently")

// SagaInstance is the stored state of one saga instance: a row of a
// SagaStore, keyed by (Saga, Correlation).
type SagaInstance struct {
	// Saga is the saga's name (NewSaga), the key space of Correlation.
	Saga string
	// Correlation is the value the saga's messages correlate on.
	Correlation string
	// ID is unique to this instance: an instance started again after
	// completion, with the same correlation value, has another ID, so the
	// old instance's timeouts never reach it.
	ID string
	// State is the saga's state, JSON-encoded.
	State []byte
	// Timeouts are the message IDs of the instance's pending timeouts
	// (RequestTimeout), cancelled when the saga completes.
	Timeouts []string
	// Version counts the writes of the instance, from 1. An update names
	// the version it read; the store refuses it when the stored version
	// differs (optimistic concurrency).
	Version int64
}

// SagaStore is implemented by persistences that store saga instances: the
// in-memory persistence, PostgreSQL, SQLite and MongoDB.
// bustest.SagaTests defines the contract.
//
// When the persistence is also an OutboxStore and ctx carries the handling
// transaction of the outbox (HandlingTx.Context), every method runs in that
// transaction, so the state commits with the handler's writes and the
// messages it sent.
type SagaStore interface {
	Persistence
	// LoadSaga returns the instance of saga with the correlation value, and
	// false when there is none.
	LoadSaga(ctx context.Context, saga, correlation string) (SagaInstance, bool, error)
	// InsertSaga stores a new instance at version 1. When one with its saga
	// and correlation exists it stores nothing and returns an error wrapping
	// ErrSagaConflict: of two racing inserts, one wins.
	InsertSaga(ctx context.Context, inst SagaInstance) error
	// UpdateSaga replaces State and Timeouts of the instance whose stored
	// version is inst.Version, and stores version inst.Version+1. Another
	// stored version, or no instance: an error wrapping ErrSagaConflict.
	UpdateSaga(ctx context.Context, inst SagaInstance) error
	// DeleteSaga removes the instance if its stored version is version;
	// otherwise it returns an error wrapping ErrSagaConflict.
	DeleteSaga(ctx context.Context, saga, correlation string, version int64) error
}

package backend

import (
	"context"
	"time"
)

// TxCarrier is implemented by persistences whose callers pass a
// transaction of their own in a ctx (postgres.WithTx, sqlite.WithTx,
// mysql.WithTx): CarriesTx reports whether ctx carries one. The bus runs
// every call it can in that transaction (Send, Publish and SendBatch store
// their messages in it; CancelScheduled cancels in it) and refuses the
// others with ErrCannotJoinTx rather than run them beside it on another
// connection, where they would escape the caller's rollback (or, on
// SQLite, wait for the one connection the transaction holds).
type TxCarrier interface {
	CarriesTx(ctx context.Context) bool
}

// TxCanceler is implemented by an OutboxStore that can cancel a scheduled
// message in the transaction a ctx carries: an outbox handling's
// (HandlingTx.Context) or a caller's (such as postgres.WithTx), so that the
// cancel commits or rolls back with it. Bus.CancelScheduled and saga
// completion use it.
type TxCanceler interface {
	// CancelOutgoingInTx is CancelOutgoing run in the transaction ctx
	// carries; joined reports whether ctx carried one. Without one it does
	// nothing and returns false, false, nil. A transaction the store cannot
	// use (finished, or on another database) is an error.
	CancelOutgoingInTx(ctx context.Context, id string) (cancelled, joined bool, err error)
}

// OutboxStore is implemented by persistences that can run a handling in one
// database transaction with the messages it sends (the transactional
// outbox) and remember which messages an endpoint handled (the inbox).
type OutboxStore interface {
	Persistence
	ScheduledStore
	// BeginHandling opens the transaction of one handling of messageID at
	// endpoint and inserts its inbox row. When the endpoint already handled
	// the message (its row is there, committed), it returns a nil
	// HandlingTx and handled true, with nothing left open. Two concurrent
	// calls for one message and endpoint: the second waits for the first
	// to commit (then handled) or roll back (then it proceeds).
	BeginHandling(ctx context.Context, endpoint, messageID string) (tx HandlingTx, handled bool, err error)
	// StoreOutgoingInCallerTx stores msgs in the caller's own transaction
	// when ctx carries one (such as postgres.WithTx), and reports whether
	// it did. Without one it does nothing and returns false.
	StoreOutgoingInCallerTx(ctx context.Context, msgs []OutgoingMessage) (bool, error)
	// PurgeInbox deletes up to limit inbox rows older than olderThan (on
	// the store's clock) and returns how many it deleted.
	PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int, error)
}

// HandlingTx is the database transaction of one handling.
type HandlingTx interface {
	// Context returns ctx carrying the transaction, for the handler (the
	// driver's accessor, such as postgres.Tx, finds it there).
	Context(ctx context.Context) context.Context
	// StoreOutgoing stores the handler's messages in the transaction.
	StoreOutgoing(ctx context.Context, msgs []OutgoingMessage) error
	// Commit commits the handling: inbox row, handler writes, messages.
	Commit(ctx context.Context) error
	// Rollback abandons the transaction; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

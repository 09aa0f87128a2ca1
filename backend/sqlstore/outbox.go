package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/postbus/bus/backend"
)

// OutboxSQL is the SQL of the inbox.
type OutboxSQL struct {
	// Inbox inserts the inbox row of a handling: it takes
	// OutboxHooks.InboxArgs (by default the endpoint and the message ID).
	// A row already there changes no row (ON CONFLICT DO NOTHING, INSERT
	// OR IGNORE) or is a unique-key violation that fails the statement
	// only; the statement waits on the key of a row another handling
	// inserted and has not committed.
	Inbox string
	// Purge deletes up to a limit of inbox rows handled before a bound,
	// oldest first: it takes OutboxHooks.PurgeArg(olderThan) and the
	// limit.
	Purge string
}

// OutboxHooks are what an Outbox asks of the rest of its store: the
// outgoing rows (written by the scheduled store) and the transactions
// the store's own accessors (Tx, WithTx) carry in a context.
type OutboxHooks struct {
	// Insert stores msgs in tx as the store's StoreOutgoing does: in a
	// handling's transaction (caller false) or in a caller's (caller
	// true). Required.
	Insert func(ctx context.Context, tx Tx, msgs []backend.OutgoingMessage, caller bool) error
	// Validate refuses, before anything is checked or stored, messages
	// the store cannot hold; its error is returned as it is. Nil: Insert
	// refuses them.
	Validate func(msgs []backend.OutgoingMessage) error
	// Cancel deletes the outgoing row id in tx unless a dispatcher holds
	// it, and returns the rows it deleted. Required.
	Cancel func(ctx context.Context, tx Tx, id string) (int64, error)
	// Context returns ctx carrying the transaction of a handling, where
	// the store's accessor (Tx) finds it and Dialect.TxFrom too. Required.
	Context func(ctx context.Context, tx Tx) context.Context
	// CallerTx returns the caller's transaction ctx carries (WithTx).
	// Nil: Dialect.TxFrom, the handling's as well.
	CallerTx func(ctx context.Context) (Tx, bool)
	// Check refuses a transaction the store cannot store rows in: on
	// another database than the store's (rows there would never be
	// dispatched), or finished. The error is the store's own (the
	// module's exported type) and is returned as it is. Required.
	Check func(ctx context.Context, tx Tx) error
	// Foreign reports an error of Check after which CancelOutgoingInTx
	// leaves ctx's transaction alone, as if it carried none. Nil: none.
	Foreign func(ctx context.Context, err error) bool
	// InboxArgs returns the parameters of OutboxSQL.Inbox, once the
	// handling's transaction began (a store's clock reads then), or an
	// error for a message ID the inbox cannot key. Nil: the endpoint and
	// the message ID (Dialect.T).
	InboxArgs func(endpoint, messageID string) ([]any, error)
	// PurgeArg returns the bound of OutboxSQL.Purge for rows handled more
	// than olderThan ago. Required.
	PurgeArg func(olderThan time.Duration) any
	// Join, if set, joins a handling's transaction to more work once its
	// inbox row is in (PostgreSQL: the transport delivery it handles). It
	// returns what to call once when the handling ends, with whether it
	// committed, or nil; an error is returned as it is, after the
	// transaction rolled back.
	Join func(ctx context.Context, tx Tx, messageID string) (end func(committed bool), err error)
}

// Outbox is the transactional outbox and inbox of a SQL store
// (backend.OutboxStore's handling methods, backend.TxCarrier and
// backend.TxCanceler).
type Outbox struct {
	d   *Dialect
	db  DB
	sql OutboxSQL
	h   OutboxHooks
}

// NewOutbox returns the outbox of the statements s on db, the store's
// pool: handlings begin their transactions on it.
func NewOutbox(d *Dialect, db DB, s OutboxSQL, h OutboxHooks) *Outbox {
	return &Outbox{d: d, db: db, sql: s, h: h}
}

// CarriesTx reports whether ctx carries a caller's transaction (WithTx):
// see backend.TxCarrier. The bus calls that cannot run in it (the
// recurring calls, ScheduledBacklog) refuse such a ctx with
// ErrCannotJoinTx.
func (o *Outbox) CarriesTx(ctx context.Context) bool {
	_, ok := o.callerTx(ctx)
	return ok
}

func (o *Outbox) callerTx(ctx context.Context) (Tx, bool) {
	if o.h.CallerTx != nil {
		return o.h.CallerTx(ctx)
	}
	if o.d.TxFrom == nil {
		return nil, false
	}
	return o.d.TxFrom(ctx)
}

// BeginHandling opens the transaction of one handling of messageID at
// endpoint and inserts its inbox row. When the row is already there,
// committed, the endpoint handled the message: the transaction is rolled
// back and handled is true. A concurrent handling of the same message at
// the same endpoint that has inserted the row but not committed makes
// this call wait on the row's key: then it sees the row (handled) if that
// handling commits, or inserts it if that one rolls back.
//
// The transaction holds a connection of the store's pool until Commit or
// Rollback.
func (o *Outbox) BeginHandling(ctx context.Context, endpoint, messageID string) (backend.HandlingTx, bool, error) {
	tx, err := o.db.Begin(ctx)
	if err != nil {
		return nil, false, o.d.Errorf("begin handling: %w", err)
	}
	args := []any{o.d.T(endpoint), o.d.T(messageID)}
	if o.h.InboxArgs != nil {
		if args, err = o.h.InboxArgs(endpoint, messageID); err != nil {
			_ = Rollback(ctx, tx)
			return nil, false, o.d.Errorf("begin handling: %w", err)
		}
	}
	n, err := tx.Exec(ctx, o.sql.Inbox, args...)
	if err != nil || n == 0 {
		rerr := Rollback(ctx, tx)
		if err != nil && !o.d.Unique(err) {
			return nil, false, o.d.Errorf("begin handling: insert the inbox row: %w", err)
		}
		if rerr != nil {
			return nil, false, o.d.Errorf("begin handling: roll back a duplicate: %w", rerr)
		}
		return nil, true, nil
	}
	h := &handling{o: o, tx: tx}
	if o.h.Join != nil {
		if h.end, err = o.h.Join(ctx, tx, messageID); err != nil {
			_ = Rollback(ctx, tx)
			return nil, false, err
		}
	}
	return h, false, nil
}

// handling is the backend.HandlingTx of BeginHandling.
type handling struct {
	o         *Outbox
	tx        Tx
	end       func(committed bool) // from OutboxHooks.Join, or nil
	committed bool
	ended     bool
}

// Context returns ctx carrying the transaction, for the store's Tx.
func (h *handling) Context(ctx context.Context) context.Context { return h.o.h.Context(ctx, h.tx) }

// StoreOutgoing inserts msgs in the transaction, as the store's
// StoreOutgoing does in its own; the rows become visible at commit.
func (h *handling) StoreOutgoing(ctx context.Context, msgs []backend.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	if err := h.o.validate(msgs); err != nil {
		return err
	}
	if err := h.o.h.Insert(ctx, h.tx, msgs, false); err != nil {
		return h.o.d.Errorf("store in the handling's transaction: %w", err)
	}
	return nil
}

// Commit commits the inbox row, the handler's writes and the messages.
func (h *handling) Commit(ctx context.Context) error {
	err := h.tx.Commit(ctx)
	h.finish(err == nil)
	if err != nil {
		return h.o.d.Errorf("commit the handling: %w", err)
	}
	h.committed = true
	return nil
}

// Rollback abandons the transaction. After Commit, or after a failed
// Commit (which already ended it), it does nothing.
func (h *handling) Rollback(ctx context.Context) error {
	if h.committed {
		return nil
	}
	defer h.finish(false)
	if err := h.tx.Rollback(ctx); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return h.o.d.Errorf("roll back the handling: %w", err)
	}
	return nil
}

// finish calls the end of Join once.
func (h *handling) finish(committed bool) {
	if h.end != nil && !h.ended {
		h.ended = true
		h.end(committed)
	}
}

func (o *Outbox) validate(msgs []backend.OutgoingMessage) error {
	if o.h.Validate == nil {
		return nil
	}
	return o.h.Validate(msgs)
}

// StoreOutgoingInCallerTx stores msgs in the caller's transaction ctx
// carries (WithTx) and reports true; without one it does nothing and
// reports false. It first checks the transaction: a finished one, or one
// on another database than the store's, is refused with the store's
// error, and nothing is stored.
func (o *Outbox) StoreOutgoingInCallerTx(ctx context.Context, msgs []backend.OutgoingMessage) (bool, error) {
	tx, ok := o.callerTx(ctx)
	if !ok {
		return false, nil
	}
	if err := o.validate(msgs); err != nil {
		return false, err
	}
	if err := o.h.Check(ctx, tx); err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		return true, ctx.Err()
	}
	if err := o.h.Insert(ctx, tx, msgs, true); err != nil {
		return false, o.d.Errorf("store in the caller's transaction: %w", err)
	}
	return true, nil
}

// CancelOutgoingInTx is CancelOutgoing run in the transaction ctx carries,
// the outbox handling's or the caller's (WithTx), so the cancel commits
// or rolls back with it; joined reports whether ctx carried one. Without
// one it does nothing. A transaction the store cannot use (finished, or
// on another database) is the store's error. Until the transaction ends,
// the row stays locked: dispatchers skip it.
func (o *Outbox) CancelOutgoingInTx(ctx context.Context, id string) (cancelled, joined bool, err error) {
	if o.d.TxFrom == nil {
		return false, false, nil
	}
	tx, ok := o.d.TxFrom(ctx)
	if !ok {
		return false, false, nil
	}
	if err := o.h.Check(ctx, tx); err != nil {
		if o.h.Foreign != nil && o.h.Foreign(ctx, err) {
			return false, false, nil
		}
		return false, true, err
	}
	n, err := o.h.Cancel(ctx, tx, id)
	if err != nil {
		return false, true, o.d.Errorf("cancel in the transaction: %w", err)
	}
	return n > 0, true, nil
}

// PurgeInbox deletes up to limit inbox rows handled more than olderThan
// ago, in one statement on the store's pool, and returns how many it
// deleted.
func (o *Outbox) PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	n, err := o.db.Exec(ctx, o.sql.Purge, o.h.PurgeArg(olderThan), limit)
	if err != nil {
		return 0, o.d.Errorf("purge inbox: %w", err)
	}
	return int(n), nil
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// queryFile names the main database's file as SQLite resolved it ("" for
// an in-memory database).
const queryFile = "SELECT file FROM pragma_database_list WHERE name = 'main'"

// txKey is the context key of the transaction Tx returns.
type txKey struct{}

// Tx returns the transaction ctx carries. Inside a handler of a bus with
// bus.Config.Outbox.Enabled it is the transaction of the handling: write
// through it, and the handler's writes commit together with the inbox row
// and the messages the handler sends, or not at all. Outside handlers it
// is the caller's transaction that WithTx put in ctx.
//
// The store's pool holds one connection and the handling holds it: inside
// a handler, use this transaction for every statement on the store's file;
// a statement through p.DB() waits for the handling to end, that is
// forever (until ctx ends).
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}

// WithTx returns ctx carrying tx, a transaction the caller opened on the
// store's own handle (p.DB().BeginTx). Outside handlers, bus.Send,
// bus.Publish, bus.SendBatch and their delayed forms with that ctx store
// the message in tx as an outbox row (with bus.Config.Outbox on or off):
// it is dispatched after tx commits, and never if tx rolls back.
// bus.CancelScheduled with that ctx cancels in tx (with the outbox on or
// off): the message stays scheduled if tx rolls back.
//
// The store's pool holds a single connection, and tx holds it until it
// commits or rolls back: meanwhile the store's dispatcher and handlings
// wait, and so does any statement on p.DB() the caller runs outside tx.
// Keep such transactions short. A transaction on another database is
// refused with a *TxError and nothing is stored.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

var _ bus.TxCarrier = (*Persistence)(nil)

// CarriesTx reports whether ctx carries a transaction (WithTx, or a
// handling's): see bus.TxCarrier. The bus calls that cannot run in it
// (the recurring calls, ScheduledBacklog) refuse such a ctx with
// bus.ErrCannotJoinTx instead of waiting for the connection it holds.
func (p *Persistence) CarriesTx(ctx context.Context) bool {
	_, ok := Tx(ctx)
	return ok
}

// ErrUnusableTx is wrapped by every *TxError.
var ErrUnusableTx = errors.New("sqlite: unusable transaction")

// TxError reports a transaction in ctx (WithTx) that the store cannot
// store messages in: it is finished, or it is on another database than the
// store's. Nothing was stored.
type TxError struct {
	Reason string
	Err    error // the failure of the check query, if any
}

// Error describes the failure.
func (e *TxError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("sqlite: the transaction in ctx cannot be used: %s: %v", e.Reason, e.Err)
	}
	return "sqlite: the transaction in ctx cannot be used: " + e.Reason
}

// Unwrap returns ErrUnusableTx and the failure of the check, so
// errors.Is(err, sql.ErrTxDone) reports a finished transaction.
func (e *TxError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnusableTx}
	}
	return []error{ErrUnusableTx, e.Err}
}

// BeginHandling opens the write transaction of one handling (BEGIN
// IMMEDIATE) and inserts the inbox row (endpoint, messageID). When the row
// is already there the endpoint handled the message: it rolls back and
// returns handled true.
//
// The transaction holds the store's single connection until Commit or
// Rollback, so the handlings of a process, its dispatcher and its other
// store calls run one after another; other processes on the file wait for
// the write lock up to Options.BusyTimeout.
func (p *Persistence) BeginHandling(ctx context.Context, endpoint, messageID string) (bus.HandlingTx, bool, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: begin handling: %w", err)
	}
	res, err := tx.ExecContext(ctx, p.q.inboxInsert, endpoint, messageID, nanos(p.now()))
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			if err := tx.Rollback(); err != nil {
				return nil, false, fmt.Errorf("sqlite: begin handling: roll back a duplicate: %w", err)
			}
			return nil, true, nil
		}
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, false, fmt.Errorf("sqlite: begin handling: insert the inbox row: %w", err)
	}
	return &handlingTx{p: p, tx: tx}, false, nil
}

// handlingTx is the bus.HandlingTx of BeginHandling.
type handlingTx struct {
	p  *Persistence
	tx *sql.Tx
}

// Context returns ctx carrying the transaction, for Tx.
func (h *handlingTx) Context(ctx context.Context) context.Context { return WithTx(ctx, h.tx) }

// StoreOutgoing inserts msgs in the transaction, as Persistence.StoreOutgoing
// does in its own.
func (h *handlingTx) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if err := h.p.insertRows(ctx, h.tx, msgs, h.p.now()); err != nil {
		return fmt.Errorf("sqlite: store in the handling's transaction: %w", err)
	}
	return nil
}

// Commit commits the handling. Other processes' dispatchers see the new
// rows through WatchDue; the bus wakes its own.
func (h *handlingTx) Commit(context.Context) error {
	if err := h.tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit the handling: %w", err)
	}
	return nil
}

// Rollback rolls the handling back; after Commit it does nothing.
func (h *handlingTx) Rollback(context.Context) error {
	if err := h.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlite: roll back the handling: %w", err)
	}
	return nil
}

// StoreOutgoingInCallerTx stores msgs in the transaction ctx carries (see
// WithTx) and reports true; without one it does nothing and reports false.
// It first queries through the transaction which file it is on: a finished
// transaction or one on another database is refused with a *TxError, and
// nothing is stored. After the caller commits, this process's dispatcher
// wakes within Options.WatchInterval (WatchDue), other processes' as for
// any commit.
func (p *Persistence) StoreOutgoingInCallerTx(ctx context.Context, msgs []bus.OutgoingMessage) (bool, error) {
	tx, ok := Tx(ctx)
	if !ok {
		return false, nil
	}
	if err := p.checkTx(ctx, tx); err != nil {
		return false, err
	}
	if err := p.insertRows(ctx, tx, msgs, p.now()); err != nil {
		return false, fmt.Errorf("sqlite: store in the caller's transaction: %w", err)
	}
	p.stored.Store(true)
	return true, nil
}

// checkTx queries through tx which file it is on: a finished transaction
// or one on another database is a *TxError.
func (p *Persistence) checkTx(ctx context.Context, tx *sql.Tx) error {
	var file string
	if err := tx.QueryRowContext(ctx, queryFile).Scan(&file); err != nil {
		return &TxError{Reason: "a query through it failed", Err: err}
	}
	if file != p.file {
		return &TxError{Reason: fmt.Sprintf("it is on database %q, the store on %q; begin it with the store's DB()", file, p.file)}
	}
	return nil
}

// CancelOutgoingInTx is CancelOutgoing run in the transaction ctx carries
// (Tx: the outbox handling's, or the caller's from WithTx), so the cancel
// commits or rolls back with it; joined reports whether ctx carried one.
// Without one it does nothing. The transaction holds the store's only
// connection: CancelOutgoing would wait for it to end. A finished
// transaction or one on another database is a *TxError.
func (p *Persistence) CancelOutgoingInTx(ctx context.Context, id string) (cancelled, joined bool, err error) {
	tx, ok := Tx(ctx)
	if !ok {
		return false, false, nil
	}
	if err := p.checkTx(ctx, tx); err != nil {
		return false, true, err
	}
	res, err := tx.ExecContext(ctx, p.q.cancelOne, id, nanos(p.now()))
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, true, fmt.Errorf("sqlite: cancel in the transaction: %w", err)
	}
	return n > 0, true, nil
}

// ConnectionPool describes the store's pool for bus.Start's check: one
// connection, which every caller of the process takes in turn (an outbox
// handling holds it until it commits).
func (p *Persistence) ConnectionPool(bus.Transport) bus.ConnectionPool {
	return bus.ConnectionPool{MaxConns: p.db.Stats().MaxOpenConnections, Serialized: true}
}

// PurgeInbox deletes up to limit inbox rows written more than olderThan
// before the store's now, oldest first, and returns how many it deleted.
func (p *Persistence) PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	res, err := p.db.ExecContext(ctx, p.q.inboxPurge, nanos(p.now().Add(-olderThan)), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge inbox: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge inbox: %w", err)
	}
	return int(n), nil
}

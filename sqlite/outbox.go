package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
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

// outbox is the outbox and inbox, whose methods (BeginHandling,
// StoreOutgoingInCallerTx, CancelOutgoingInTx, PurgeInbox, CarriesTx)
// Persistence promotes. A handling is a write transaction (BEGIN
// IMMEDIATE) that holds the store's single connection until Commit or
// Rollback, so the handlings of a process, its dispatcher and its other
// store calls run one after another; other processes on the file wait for
// the write lock up to Options.BusyTimeout. CancelOutgoingInTx must run in
// the transaction: CancelOutgoing would wait for it to end. After a
// caller commits rows it stored, this process's dispatcher wakes within
// Options.WatchInterval (WatchDue), other processes' as for any commit.
// Inbox rows are purged on the store's clock.
type outbox = sqlstore.Outbox

// newOutbox returns the outbox of p.
func newOutbox(p *Persistence, d *sqlstore.Dialect) *outbox {
	native := func(tx sqlstore.Tx) *sql.Tx { t, _ := sqlstore.SQLTx(tx); return t }
	return sqlstore.NewOutbox(d, sqlstore.FromDB(p.db, nil), sqlstore.OutboxSQL{Inbox: p.q.inboxInsert, Purge: p.q.inboxPurge}, sqlstore.OutboxHooks{
		Insert: func(ctx context.Context, tx sqlstore.Tx, msgs []bus.OutgoingMessage, caller bool) error {
			err := p.insertRows(ctx, native(tx), msgs, p.now())
			if err == nil && caller {
				p.stored.Store(true)
			}
			return err
		},
		Cancel: func(ctx context.Context, tx sqlstore.Tx, id string) (int64, error) {
			return tx.Exec(ctx, p.q.cancelOne, id, nanos(p.now()))
		},
		Context: func(ctx context.Context, tx sqlstore.Tx) context.Context { return WithTx(ctx, native(tx)) },
		Check:   p.checkTx,
		InboxArgs: func(endpoint, messageID string) ([]any, error) {
			return []any{endpoint, messageID, nanos(p.now())}, nil
		},
		PurgeArg: func(olderThan time.Duration) any { return nanos(p.now().Add(-olderThan)) },
	})
}

// checkTx queries through tx which file it is on: a finished transaction
// or one on another database is a *TxError.
func (p *Persistence) checkTx(ctx context.Context, tx sqlstore.Tx) error {
	var file string
	if err := tx.QueryRow(ctx, queryFile).Scan(&file); err != nil {
		return &TxError{Reason: "a query through it failed", Err: err}
	}
	if file != p.file {
		return &TxError{Reason: fmt.Sprintf("it is on database %q, the store on %q; begin it with the store's DB()", file, p.file)}
	}
	return nil
}

// ConnectionPool describes the store's pool for bus.Start's check: one
// connection, which every caller of the process takes in turn (an outbox
// handling holds it until it commits).
func (p *Persistence) ConnectionPool(bus.Transport) bus.ConnectionPool {
	return bus.ConnectionPool{MaxConns: p.db.Stats().MaxOpenConnections, Serialized: true}
}

package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// txKey is the context key of the transaction Tx returns.
type txKey struct{}

// Tx returns the transaction ctx carries. Inside a handler of a bus with
// bus.Config.Outbox.Enabled it is the transaction of the handling: write
// through it, and the handler's writes commit together with the inbox row
// and the messages the handler sends, or not at all. The transaction
// belongs to the bus: do not commit or roll it back, nor use it after the
// handler returned. Outside handlers it is the caller's transaction that
// WithTx put in ctx.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}

// WithTx returns ctx carrying tx, a transaction the caller opened on the
// store's database. Outside handlers, bus.Send, bus.Publish, bus.SendBatch
// and their delayed forms with that ctx store the message in tx as an
// outbox row (with bus.Config.Outbox on or off): it is dispatched after tx
// commits, and never if tx rolls back. bus.CancelScheduled with that ctx
// cancels in tx: the message stays scheduled if tx rolls back. A transaction on another database or server is
// refused with a *TxError, and nothing is stored.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// ErrUnusableTx is wrapped by every *TxError.
var ErrUnusableTx = errors.New("mysql: unusable transaction")

// TxError reports a transaction in ctx (WithTx) that the store cannot
// store messages in: it is finished, or it is on another database than
// the store's. Nothing was stored.
type TxError struct {
	Reason string
	Err    error // the failure of the check query, if any
}

// Error describes the failure.
func (e *TxError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("mysql: the transaction in ctx cannot be used: %s: %v", e.Reason, e.Err)
	}
	return "mysql: the transaction in ctx cannot be used: " + e.Reason
}

// Unwrap returns ErrUnusableTx and the failure of the check, so
// errors.Is(err, sql.ErrTxDone) reports a finished transaction.
func (e *TxError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnusableTx}
	}
	return []error{ErrUnusableTx, e.Err}
}

// errDuplicate is the server's error number for a duplicate key.
const errDuplicate = 1062

// errDeadlock is the server's error number for a transaction rolled back
// as a deadlock victim.
const errDeadlock = 1213

// isDeadlock reports a deadlock error: the server rolled the whole
// transaction back.
func isDeadlock(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == errDeadlock
}

// isDuplicate reports a duplicate-key error. In MySQL and MariaDB it
// fails the statement only: the transaction stays usable.
func isDuplicate(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == errDuplicate
}

// outbox is the outbox and inbox, whose methods (BeginHandling,
// StoreOutgoingInCallerTx, CancelOutgoingInTx, PurgeInbox, CarriesTx)
// Persistence promotes. A handling runs at Options.Isolation (READ
// COMMITTED by default); a concurrent handling of the same message waits
// on the inbox row's key up to innodb_lock_wait_timeout. Its transaction
// holds a connection of db's pool until Commit or Rollback: size the pool
// (SetMaxOpenConns) above Concurrency plus one for the dispatcher. Other
// processes' dispatchers find the rows a handling or a caller's
// transaction stored through WatchDue, within Options.WatchInterval; the
// bus wakes its own after a handling.
type outbox = sqlstore.Outbox

// newOutbox returns the outbox of p.
func newOutbox(p *Persistence, d *sqlstore.Dialect) *outbox {
	native := func(tx sqlstore.Tx) *sql.Tx { t, _ := sqlstore.SQLTx(tx); return t }
	db := sqlstore.FromDB(p.db, &sql.TxOptions{Isolation: p.opts.Isolation})
	return sqlstore.NewOutbox(d, db, sqlstore.OutboxSQL{Inbox: p.q.inbox, Purge: p.q.purge}, sqlstore.OutboxHooks{
		Insert: func(ctx context.Context, tx sqlstore.Tx, msgs []bus.OutgoingMessage, _ bool) error {
			return p.insertRows(ctx, native(tx), msgs)
		},
		Validate: checkRows,
		Cancel: func(ctx context.Context, tx sqlstore.Tx, id string) (int64, error) {
			n, err := p.cancelIn1(ctx, native(tx), id)
			return int64(n), err
		},
		Context:  func(ctx context.Context, tx sqlstore.Tx) context.Context { return WithTx(ctx, native(tx)) },
		Check:    p.checkTx,
		PurgeArg: func(olderThan time.Duration) any { return durMicros(olderThan) },
	})
}

// originSQL names the database and server a connection is on.
const originSQL = "SELECT CONCAT_WS('/', @@hostname, @@port, DATABASE())"

// checkTx compares the database and server tx is on with the store's: a
// finished transaction or one elsewhere is a *TxError.
func (p *Persistence) checkTx(ctx context.Context, tx sqlstore.Tx) error {
	var theirs string
	if err := tx.QueryRow(ctx, originSQL).Scan(&theirs); err != nil {
		return &TxError{Reason: "a query through it failed", Err: err}
	}
	p.mu.Lock()
	ours := p.origin
	p.mu.Unlock()
	if ours == "" {
		if err := p.db.QueryRowContext(ctx, originSQL).Scan(&ours); err != nil {
			return fmt.Errorf("mysql: check the transaction: %w", err)
		}
		p.mu.Lock()
		p.origin = ours
		p.mu.Unlock()
	}
	if theirs != ours {
		return &TxError{Reason: fmt.Sprintf("it is on %q, the store on %q; begin it on the store's database", theirs, ours)}
	}
	return nil
}

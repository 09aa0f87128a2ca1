package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/postbus/bus"
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

var _ bus.TxCarrier = (*Persistence)(nil)

// CarriesTx reports whether ctx carries a transaction (WithTx, or a
// handling's): see bus.TxCarrier. The bus calls that cannot run in it
// (the recurring calls, ScheduledBacklog) refuse such a ctx with
// bus.ErrCannotJoinTx.
func (p *Persistence) CarriesTx(ctx context.Context) bool {
	_, ok := Tx(ctx)
	return ok
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

// BeginHandling opens the transaction of one handling (at
// Options.Isolation, READ COMMITTED by default) and inserts the inbox row
// (endpoint, messageID). When the row is already there, committed, the
// endpoint handled the message: it rolls back and returns handled true. A
// concurrent handling of the same message at the same endpoint that has
// inserted the row but not committed makes this call wait on the row's
// key (up to innodb_lock_wait_timeout): then it finds the row (handled) if
// that handling commits, or inserts it if that one rolls back.
//
// The transaction holds a connection of db's pool until Commit or
// Rollback: size the pool (SetMaxOpenConns) above Concurrency plus one
// for the dispatcher.
func (p *Persistence) BeginHandling(ctx context.Context, endpoint, messageID string) (bus.HandlingTx, bool, error) {
	tx, err := p.db.BeginTx(ctx, &sql.TxOptions{Isolation: p.opts.Isolation})
	if err != nil {
		return nil, false, fmt.Errorf("mysql: begin handling: %w", err)
	}
	if _, err := tx.ExecContext(ctx, p.q.inbox, []byte(endpoint), []byte(messageID)); err != nil {
		rerr := tx.Rollback()
		if !isDuplicate(err) {
			return nil, false, fmt.Errorf("mysql: begin handling: insert the inbox row: %w", err)
		}
		if rerr != nil {
			return nil, false, fmt.Errorf("mysql: begin handling: roll back a duplicate: %w", rerr)
		}
		return nil, true, nil
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

// StoreOutgoing inserts msgs in the transaction, as
// Persistence.StoreOutgoing does in its own; the rows become visible at
// commit.
func (h *handlingTx) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if err := h.p.insertRows(ctx, h.tx, msgs); err != nil {
		return fmt.Errorf("mysql: store in the handling's transaction: %w", err)
	}
	return nil
}

// Commit commits the handling. Other processes' dispatchers find the new
// rows through WatchDue; the bus wakes its own.
func (h *handlingTx) Commit(context.Context) error {
	if err := h.tx.Commit(); err != nil {
		return fmt.Errorf("mysql: commit the handling: %w", err)
	}
	return nil
}

// Rollback rolls the handling back; after Commit it does nothing.
func (h *handlingTx) Rollback(context.Context) error {
	if err := h.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("mysql: roll back the handling: %w", err)
	}
	return nil
}

// StoreOutgoingInCallerTx stores msgs in the transaction ctx carries (see
// WithTx) and reports true; without one it does nothing and reports
// false. It first checks through the transaction which database and
// server it is on: a finished transaction or one elsewhere is refused
// with a *TxError, and nothing is stored. After the caller commits, the
// dispatchers of every process (this one included) find the rows within
// Options.WatchInterval (WatchDue).
func (p *Persistence) StoreOutgoingInCallerTx(ctx context.Context, msgs []bus.OutgoingMessage) (bool, error) {
	tx, ok := Tx(ctx)
	if !ok {
		return false, nil
	}
	if err := checkRows(msgs); err != nil {
		return false, err
	}
	if err := p.checkTx(ctx, tx); err != nil {
		return false, err
	}
	if err := p.insertRows(ctx, tx, msgs); err != nil {
		return false, fmt.Errorf("mysql: store in the caller's transaction: %w", err)
	}
	return true, nil
}

// originSQL names the database and server a connection is on.
const originSQL = "SELECT CONCAT_WS('/', @@hostname, @@port, DATABASE())"

// checkTx compares the database and server tx is on with the store's: a
// finished transaction or one elsewhere is a *TxError.
func (p *Persistence) checkTx(ctx context.Context, tx *sql.Tx) error {
	var theirs string
	if err := tx.QueryRowContext(ctx, originSQL).Scan(&theirs); err != nil {
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

// CancelOutgoingInTx is CancelOutgoing run in the transaction ctx carries
// (Tx: the outbox handling's, or the caller's from WithTx), so the cancel
// commits or rolls back with it; joined reports whether ctx carried one.
// Without one it does nothing. A finished transaction or one on another
// database is a *TxError. Until the transaction ends, the row stays
// locked: dispatchers skip it.
func (p *Persistence) CancelOutgoingInTx(ctx context.Context, id string) (cancelled, joined bool, err error) {
	tx, ok := Tx(ctx)
	if !ok {
		return false, false, nil
	}
	if err := p.checkTx(ctx, tx); err != nil {
		return false, true, err
	}
	n, err := p.cancelIn1(ctx, tx, id)
	if err != nil {
		return false, true, fmt.Errorf("mysql: cancel in the transaction: %w", err)
	}
	return n > 0, true, nil
}

// PurgeInbox deletes up to limit inbox rows handled more than olderThan
// before the server's now, oldest first, and returns how many it deleted.
func (p *Persistence) PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	n, err := execCount(ctx, p.db, p.q.purge, durMicros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("mysql: purge inbox: %w", err)
	}
	return n, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
)

// handlingKey carries the transaction of an outbox handling in a context.
type handlingKey struct{}

// callerKey carries a caller's transaction in a context (WithTx).
type callerKey struct{}

// Tx returns the transaction of the outbox handling that ctx belongs to, and
// false outside one. With bus.Config.Outbox enabled, a handler writes its
// business rows through it: they commit together with the handling's inbox
// row and the messages it sends, or not at all. The transaction belongs to
// the bus: do not commit or roll it back, and do not use it from other
// goroutines or after the handler returned (with bus.Config.HandlerTimeout,
// the bus rolls it back when the timeout passes: pass ctx to every query).
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(handlingKey{}).(pgx.Tx)
	return tx, ok && tx != nil
}

// WithTx returns ctx carrying tx, a transaction of the caller's own on the
// store's database. Send, Publish and SendBatch with that ctx store their
// messages in tx instead of sending them (with bus.Config.Outbox on or
// off): they are dispatched after the caller commits tx, and never if tx
// rolls back. A transaction on another database is refused at send with
// an *OtherDatabaseError, and nothing is stored. bus.CancelScheduled with
// that ctx cancels in tx: the message stays scheduled if tx rolls back.
// The bus calls that cannot run in tx (the recurring calls,
// ScheduledBacklog) refuse that ctx with bus.ErrCannotJoinTx.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, callerKey{}, tx)
}

var _ bus.TxCarrier = (*Persistence)(nil)

// CarriesTx reports whether ctx carries a caller's transaction (WithTx):
// see bus.TxCarrier.
func (p *Persistence) CarriesTx(ctx context.Context) bool {
	tx, ok := ctx.Value(callerKey{}).(pgx.Tx)
	return ok && tx != nil
}

// BeginHandling opens the transaction of one handling of messageID at
// endpoint on a pooled connection and inserts its inbox row (ON CONFLICT DO
// NOTHING). When the row is already there, committed, the transaction is
// rolled back and handled is true. A concurrent handling of the same
// message at the same endpoint that has inserted the row but not committed
// makes this call wait on the row's key: then it sees the row (handled) if
// that handling commits, or inserts it if that one rolls back.
//
// The transaction holds its connection until Commit or Rollback: size the
// pool above Concurrency plus what the dispatcher and the handlers' other
// queries need.
func (p *Persistence) BeginHandling(ctx context.Context, endpoint, messageID string) (bus.HandlingTx, bool, error) {
	if !storableID(messageID) {
		return nil, false, fmt.Errorf("postgres: begin handling: %w", &InvalidRowError{ID: messageID, Reason: "message ID is not valid UTF-8 text without NUL bytes: the inbox cannot key it"})
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: begin handling: %w", err)
	}
	tag, err := tx.Exec(ctx, p.sql.inbox, cleanText(endpoint), messageID)
	if err != nil || tag.RowsAffected() == 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		rerr := tx.Rollback(rctx)
		cancel()
		if err != nil {
			return nil, false, fmt.Errorf("postgres: begin handling: inbox row: %w", err)
		}
		if rerr != nil {
			return nil, false, fmt.Errorf("postgres: begin handling: rollback: %w", rerr)
		}
		return nil, true, nil
	}
	d, err := p.joinDelivery(ctx, tx, messageID)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = tx.Rollback(rctx)
		cancel()
		return nil, false, err
	}
	return &handling{p: p, tx: tx, d: d}, false, nil
}

// handling is the bus.HandlingTx of a Persistence.
type handling struct {
	p         *Persistence
	tx        pgx.Tx
	d         *delivery // the Transport delivery acknowledged in tx, if any
	committed bool
	ended     bool
}

// Context returns ctx carrying the transaction, found by Tx.
func (h *handling) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, handlingKey{}, h.tx)
}

// StoreOutgoing inserts msgs in the transaction, as Persistence.StoreOutgoing
// does (ON CONFLICT DO NOTHING, Delay from the statement time, transport,
// pg_notify when a row is due soon and notifications are on, unless
// bus.LocalDispatcher says this process sends them); the rows and the
// notification become visible at commit.
func (h *handling) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for i := range msgs {
		if err := checkRow(&msgs[i]); err != nil {
			return err
		}
	}
	// Rows a dispatcher in this process sends as soon as the handling
	// commits need no NOTIFY, which would cost every commit.
	if err := h.p.insertOn(ctx, h.tx, msgs, !bus.LocalDispatcher(ctx)); err != nil {
		return fmt.Errorf("postgres: store outgoing in handling: %w", err)
	}
	return nil
}

// Commit commits the inbox row, the handler's writes and the messages.
func (h *handling) Commit(ctx context.Context) error {
	err := h.tx.Commit(ctx)
	h.end(err == nil)
	if err != nil {
		return fmt.Errorf("postgres: commit handling: %w", err)
	}
	h.committed = true
	return nil
}

// end releases the handling's hold on its delivery once.
func (h *handling) end(committed bool) {
	if !h.ended {
		h.ended = true
		h.d.settled(committed)
	}
}

// Rollback abandons the transaction. After Commit, or after a failed
// Commit (which already ended it), it does nothing.
func (h *handling) Rollback(ctx context.Context) error {
	if h.committed {
		return nil
	}
	defer h.end(false)
	if err := h.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("postgres: rollback handling: %w", err)
	}
	return nil
}

// StoreOutgoingInCallerTx stores msgs in the transaction ctx carries from
// WithTx, as StoreOutgoing would (a notification too, delivered when the
// caller commits), and reports true. Without one it does nothing and
// reports false. A transaction on another database than the store's pool
// is an *OtherDatabaseError, and nothing is stored.
func (p *Persistence) StoreOutgoingInCallerTx(ctx context.Context, msgs []bus.OutgoingMessage) (bool, error) {
	tx, ok := ctx.Value(callerKey{}).(pgx.Tx)
	if !ok || tx == nil {
		return false, nil
	}
	for i := range msgs {
		if err := checkRow(&msgs[i]); err != nil {
			return false, err
		}
	}
	if err := p.checkSameDatabase(ctx, tx); err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		return true, ctx.Err()
	}
	if err := p.insertOn(ctx, tx, msgs, true); err != nil {
		return false, fmt.Errorf("postgres: store outgoing in the caller's transaction: %w", err)
	}
	return true, nil
}

// txFrom returns the transaction ctx carries: the outbox handling's (Tx),
// or else the caller's (WithTx).
func txFrom(ctx context.Context) (pgx.Tx, bool) {
	if tx, ok := Tx(ctx); ok {
		return tx, true
	}
	tx, ok := ctx.Value(callerKey{}).(pgx.Tx)
	return tx, ok && tx != nil
}

// CancelOutgoingInTx is CancelOutgoing run in the transaction ctx carries,
// the outbox handling's (Tx) or the caller's (WithTx), so the cancel
// commits or rolls back with it; joined reports whether ctx carried one.
// Without one it does nothing, and so it does with the handling of a store
// on another database (a bus on another store called with its handler's
// ctx). A caller's transaction on another database than the store's pool
// is an *OtherDatabaseError. Until the transaction ends, the row stays
// locked: dispatchers skip it.
func (p *Persistence) CancelOutgoingInTx(ctx context.Context, id string) (cancelled, joined bool, err error) {
	_, handling := Tx(ctx)
	tx, ok := txFrom(ctx)
	if !ok {
		return false, false, nil
	}
	if err := p.checkSameDatabase(ctx, tx); err != nil {
		var other *OtherDatabaseError
		if handling && errors.As(err, &other) {
			return false, false, nil
		}
		return false, true, err
	}
	if !storableID(id) {
		return false, true, nil // no stored row has it
	}
	tag, err := tx.Exec(ctx, p.sql.cancel, id)
	if err != nil {
		return false, true, fmt.Errorf("postgres: cancel outgoing in the transaction: %w", err)
	}
	return tag.RowsAffected() > 0, true, nil
}

// ConnectionPool describes the store's pool for bus.Start's check: its
// MaxConns, the LISTEN connection WatchDue holds unless notifications are
// off, and a Transport on the same pool, which holds a LISTEN connection
// of its own (unless its notifications are off) and needs one more for
// its claims, acknowledgements and sends.
func (p *Persistence) ConnectionPool(t bus.Transport) bus.ConnectionPool {
	cp := bus.ConnectionPool{MaxConns: int(p.pool.Config().MaxConns)}
	if !p.opts.DisableNotify {
		cp.WatchConns = 1
	}
	if tr, ok := t.(*Transport); ok && tr.pool == p.pool {
		cp.TransportShares = true
		if !tr.opts.DisableNotify {
			cp.TransportConns = 1
		}
	}
	return cp
}

// PurgeInbox deletes up to limit inbox rows handled more than olderThan
// ago on the server's clock, in one statement, and returns how many it
// deleted. Rows a concurrent purge is deleting are skipped.
func (p *Persistence) PurgeInbox(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	tag, err := p.pool.Exec(ctx, p.sql.purge, micros(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge inbox: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// InboxTable returns the quoted, schema-qualified inbox table name.
func (p *Persistence) InboxTable() string { return p.names.inbox }

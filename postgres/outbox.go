package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
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

// outbox is the outbox and inbox, whose methods (BeginHandling,
// StoreOutgoingInCallerTx, CancelOutgoingInTx, PurgeInbox, CarriesTx)
// Persistence promotes. A handling's transaction holds a pooled
// connection until Commit or Rollback: size the pool above Concurrency
// plus what the dispatcher and the handlers' other queries need. Inside a
// handling, StoreOutgoing notifies only for rows no dispatcher of this
// process sends (bus.LocalDispatcher), so not every commit pays a NOTIFY;
// a caller's transaction notifies as StoreOutgoing would, at its commit.
// CancelOutgoingInTx leaves alone the handling of a store on another
// database (a bus on another store called with its handler's ctx).
type outbox = sqlstore.Outbox

// newOutbox returns the outbox of p, on its pool.
func newOutbox(p *Persistence, d *sqlstore.Dialect) *outbox {
	native := func(tx sqlstore.Tx) pgx.Tx { return tx.(kitTx).tx } // every Tx here is a kitTx
	return sqlstore.NewOutbox(d, newKitDB(p.pool), sqlstore.OutboxSQL{Inbox: p.sql.inbox, Purge: p.sql.purge}, sqlstore.OutboxHooks{
		Insert: func(ctx context.Context, tx sqlstore.Tx, msgs []bus.OutgoingMessage, caller bool) error {
			return p.insertOn(ctx, native(tx), msgs, caller || !bus.LocalDispatcher(ctx))
		},
		Validate: func(msgs []bus.OutgoingMessage) error {
			for i := range msgs {
				if err := checkRow(&msgs[i]); err != nil {
					return err
				}
			}
			return nil
		},
		Cancel: func(ctx context.Context, tx sqlstore.Tx, id string) (int64, error) {
			if !storableID(id) {
				return 0, nil // no stored row has it
			}
			return tx.Exec(ctx, p.sql.cancel, id)
		},
		Context: func(ctx context.Context, tx sqlstore.Tx) context.Context {
			return context.WithValue(ctx, handlingKey{}, native(tx))
		},
		CallerTx: func(ctx context.Context) (sqlstore.Tx, bool) {
			tx, ok := ctx.Value(callerKey{}).(pgx.Tx)
			return kitTx{kitQ{tx}, tx}, ok && tx != nil
		},
		Check: func(ctx context.Context, tx sqlstore.Tx) error { return p.checkSameDatabase(ctx, native(tx)) },
		Foreign: func(ctx context.Context, err error) bool {
			_, handling := Tx(ctx)
			var other *OtherDatabaseError
			return handling && errors.As(err, &other)
		},
		InboxArgs: func(endpoint, messageID string) ([]any, error) {
			if !storableID(messageID) {
				return nil, &InvalidRowError{ID: messageID, Reason: "message ID is not valid UTF-8 text without NUL bytes: the inbox cannot key it"}
			}
			return []any{cleanText(endpoint), messageID}, nil
		},
		PurgeArg: func(olderThan time.Duration) any { return micros(olderThan) },
		Join: func(ctx context.Context, tx sqlstore.Tx, messageID string) (func(bool), error) {
			d, err := p.joinDelivery(ctx, native(tx), messageID)
			if err != nil {
				return nil, err
			}
			return d.settled, nil
		},
	})
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

// InboxTable returns the quoted, schema-qualified inbox table name.
func (p *Persistence) InboxTable() string { return p.names.inbox }

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Receive, handle and send in one transaction.
//
// A Persistence's BeginHandling (the outbox) finds the Transport delivery
// in the handling's context, because the bus derives the handler's context
// from the delivery's. When the transport's tables are on the persistence's
// database, it deletes the claimed row inside the handling's transaction:
// the acknowledgement, the inbox row, the handler's writes and the messages
// it sent commit together or not at all. The row lock the DELETE takes
// keeps other consumers off the message while the transaction is open, and
// a crash rolls the DELETE back with the rest, so the message is delivered
// again once its lease lapses.

// joinDelivery deletes the row of the delivery that ctx carries, when there
// is one for messageID on this persistence's database, in tx. It returns
// the delivery (nil when there is none to join). When the row is no longer
// held by the delivery's lease, the delivery's context is cancelled with
// ErrLeaseLost and the error says so.
func (p *Persistence) joinDelivery(ctx context.Context, tx pgx.Tx, messageID string) (*delivery, error) {
	d := deliveryFrom(ctx)
	if d == nil || d.id != messageID || !p.sameDatabaseAs(d.t) {
		return nil, nil
	}
	d.inTx.Add(1)
	tag, err := tx.Exec(ctx, d.t.sql.ackOne, d.row.seq, d.row.token)
	if err == nil && tag.RowsAffected() == 0 {
		d.cancel(ErrLeaseLost)
		err = ErrLeaseLost
	}
	if err != nil {
		d.inTx.Add(-1)
		return nil, fmt.Errorf("postgres: acknowledge %s in the handling: %w", messageID, err)
	}
	return d, nil
}

// sameDatabaseAs reports whether t's tables are on p's database: the same
// pool, or pools configured for the same host, port and database.
func (p *Persistence) sameDatabaseAs(t *Transport) bool {
	if p.pool == t.pool {
		return true
	}
	a, b := p.pool.Config().ConnConfig, t.pool.Config().ConnConfig
	return a.Host == b.Host && a.Port == b.Port && a.Database == b.Database
}

// settled ends the handling's hold on its delivery's row: committed says
// whether the row's deletion committed.
func (d *delivery) settled(committed bool) {
	if d == nil {
		return
	}
	if committed {
		d.ackedInTx.Store(true)
	}
	d.inTx.Add(-1)
}

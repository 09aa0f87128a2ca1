package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
)

// Hand-overs in the claim's transaction.
//
// When the bus's transport is a Transport on this Persistence's database,
// the dispatcher hands each claimed row over in the claim's own
// transaction (bus.HandOverJoiner): the Transport inserts the message
// there instead of committing it on its own, and the same COMMIT that
// deletes the row queues the message. A hand-over is then never both done
// and tried again: when the connection drops before the outcome of that
// COMMIT is known, either both happened or neither did, and a claim that
// is rolled back (a crash, a lapsed lease) takes its messages with it.
// Each insert runs under a savepoint, so a message the database refuses
// fails alone and the rest of the claim goes on.

// errClaimEnded is the hand-over of a row whose claim is no longer open.
var errClaimEnded = errors.New("postgres: the claim holding the row has ended; another dispatcher may hold it")

// joinKey is the context key of the claim a hand-over joins.
type joinKey struct{}

// joinedClaim is the claim a hand-over's context carries.
type joinedClaim struct {
	p *Persistence
	c *openClaim
}

// JoinsHandOver reports whether t is a Transport on this Persistence's
// database, whose sends then join the dispatcher's claims
// (bus.HandOverJoiner).
func (p *Persistence) JoinsHandOver(t bus.Transport) bool {
	pt, ok := t.(*Transport)
	return ok && p.sameDatabaseAs(pt)
}

// HandOverContext returns ctx carrying the open claim of token, for a
// Transport on this database to insert in; ctx when the claim has ended.
func (p *Persistence) HandOverContext(ctx context.Context, token string) context.Context {
	c := p.claims.get(token)
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, joinKey{}, joinedClaim{p: p, c: c})
}

// joined returns the claim ctx carries when t's tables are on its
// database.
func (t *Transport) joined(ctx context.Context) (*openClaim, bool) {
	j, ok := ctx.Value(joinKey{}).(joinedClaim)
	if !ok || !j.p.sameDatabaseAs(t) {
		return nil, false
	}
	return j.c, true
}

// insertJoined inserts row in c's transaction, under a savepoint, and
// notifies the receivers of its queues when c commits.
func (t *Transport) insertJoined(ctx context.Context, c *openClaim, row sendRow) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return errClaimEnded
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT postbus_hand_over")
	b.Queue(t.sql.send, []string{row.queue}, []string{cleanText(row.id)}, []string{cleanText(row.typ)},
		[]string{row.headers}, [][]byte{row.body}, [][]byte{row.envelope})
	b.Queue("RELEASE SAVEPOINT postbus_hand_over")
	queues, err := func() ([]string, error) {
		br := c.conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		return queues, br.Close()
	}()
	if err == nil && len(queues) > 0 && !t.opts.DisableNotify {
		// Delivered by the claim's COMMIT, once the rows are visible.
		_, err = c.conn.Exec(ctx, `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`, t.names.channel, queues)
	}
	if err == nil {
		c.used, c.wrote = time.Now(), true
		return nil
	}
	if !rowRefused(err) {
		// The claim's transaction is in doubt: end it; its rows and the
		// messages it inserted go back together.
		c.finish("ROLLBACK")
		return fmt.Errorf("hand-over in the claim's transaction: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, rerr := c.conn.Exec(rctx, "ROLLBACK TO SAVEPOINT postbus_hand_over"); rerr != nil {
		c.finish("ROLLBACK")
	}
	return err
}

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
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
	c *sqlstore.OpenClaim
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
	c := p.claims.Get(token)
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, joinKey{}, joinedClaim{p: p, c: c})
}

// joined returns the claim ctx carries when t's tables are on its
// database.
func (t *Transport) joined(ctx context.Context) (*sqlstore.OpenClaim, bool) {
	j, ok := ctx.Value(joinKey{}).(joinedClaim)
	if !ok || !j.p.sameDatabaseAs(t) {
		return nil, false
	}
	return j.c, true
}

// insertJoined inserts row in c's transaction, under a savepoint, and
// notifies the receivers of its queues when c commits.
func (t *Transport) insertJoined(ctx context.Context, c *sqlstore.OpenClaim, row sendRow) error {
	var err error
	ended, _ := c.Do(func(cc sqlstore.ClaimConn) (wrote, lost bool, _ error) {
		conn := cc.(*claimConn).conn
		err = t.insertInClaim(ctx, conn, row)
		if err == nil {
			return true, false, nil
		}
		if !rowRefused(err) {
			// The claim's transaction is in doubt: end it; its rows and the
			// messages it inserted go back together.
			err = fmt.Errorf("hand-over in the claim's transaction: %w", err)
			return false, true, err
		}
		rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		_, rerr := conn.Exec(rctx, "ROLLBACK TO SAVEPOINT postbus_hand_over")
		return false, rerr != nil, err
	})
	if ended {
		return errClaimEnded
	}
	return err
}

// insertInClaim runs the savepoint, the insert and the notification of
// insertJoined on conn.
func (t *Transport) insertInClaim(ctx context.Context, conn *pgx.Conn, row sendRow) error {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT postbus_hand_over")
	b.Queue(t.sql.send, []string{row.queue}, []string{cleanText(row.id)}, []string{cleanText(row.typ)},
		[]string{row.headers}, [][]byte{row.body}, [][]byte{row.envelope})
	b.Queue("RELEASE SAVEPOINT postbus_hand_over")
	queues, err := func() ([]string, error) {
		br := conn.SendBatch(ctx, b)
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
		_, err = conn.Exec(ctx, `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`, t.names.channel, queues)
	}
	return err
}

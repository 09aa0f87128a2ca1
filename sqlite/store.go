package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// storeRows stores checked rows (StoreOutgoing), in multi-row
// statements (see insertRows) in one transaction, so a batch is stored all
// or none; an ID that is already stored keeps its row (INSERT OR IGNORE).
func (p *Persistence) storeRows(ctx context.Context, msgs []bus.OutgoingMessage) error {
	now := p.now()
	if len(msgs) == 1 { // the common single Send: one autocommit statement
		m := &msgs[0]
		due := nanos(dueAt(m, now))
		_, err := p.db.ExecContext(ctx, p.q.insertOne, m.ID, int64(m.Kind), m.Envelope, due, due, nanos(now), m.Transport, m.Type)
		return err
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := p.insertRows(ctx, tx, msgs, now); err != nil {
		return err
	}
	return tx.Commit()
}

// insertRows inserts msgs in tx with INSERT OR IGNORE, in multi-row
// statements of insertChunk rows and single-row ones for the rest. now is
// the store's clock, for relative delays and created_at.
func (p *Persistence) insertRows(ctx context.Context, tx *sql.Tx, msgs []bus.OutgoingMessage, now time.Time) error {
	if err := checkRows(msgs); err != nil {
		return err
	}
	created := nanos(now)
	args := make([]any, 0, 8*min(len(msgs), insertChunk))
	appendRow := func(m *bus.OutgoingMessage) {
		due := nanos(dueAt(m, now))
		args = append(args, m.ID, int64(m.Kind), m.Envelope, due, due, created, m.Transport, m.Type)
	}
	rest := msgs
	if len(msgs) >= insertChunk {
		stmt, err := tx.PrepareContext(ctx, p.q.insert)
		if err != nil {
			return err
		}
		defer func() { _ = stmt.Close() }()
		for len(rest) >= insertChunk {
			args = args[:0]
			for i := range insertChunk {
				appendRow(&rest[i])
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				return err
			}
			rest = rest[insertChunk:]
		}
	}
	for i := range rest {
		args = args[:0]
		appendRow(&rest[i])
		if _, err := tx.ExecContext(ctx, p.q.insertOne, args...); err != nil {
			return err
		}
	}
	return nil
}

// checkRows refuses rows that cannot be stored: an empty ID, no envelope,
// or an ID that is not valid UTF-8 text without NUL bytes. Claims and
// settles name their rows in a JSON list of IDs (idList), which carries
// such text byte for byte and nothing else: a row with another ID could
// never be leased, and would fail every claim.
func checkRows(msgs []bus.OutgoingMessage) error {
	return sqlstore.CheckRows(msgs, sqlstore.TextID, invalidRow)
}

// invalidRow is the error of a row checkRows refuses.
func invalidRow(i int, id, reason string) error {
	return fmt.Errorf("sqlite: store: row %d (%q): %w: %s", i, id, bus.ErrInvalidMessage, reason)
}

// dueAt is when m falls due: now+Delay for a relative delay, else DueAt.
func dueAt(m *bus.OutgoingMessage, now time.Time) time.Time {
	if m.Delay > 0 {
		return now.Add(m.Delay)
	}
	return m.DueAt
}

// ClaimDueOutgoing leases up to limit rows of transport (and rows stored
// without a transport) that are claimable at the store's now, earliest
// first, until now+lease, under a new lease token. The now argument is not
// used: the store compares on its own clock (see StoreNow). The select and
// the lease run in one write transaction (BEGIN IMMEDIATE), and SQLite
// admits one writer per file at a time, across processes too, so no row is
// handed to two claimers.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.ClaimOutgoingAhead(ctx, transport, time.Time{}, 0, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by the
// store's now + ahead, leased until now + ahead + lease, in the same one
// write transaction (bus.AheadClaimer). It returns the store's now with the
// rows, and each row's AvailableAt.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	p.noteTransport(transport)
	if limit <= 0 {
		return bus.AheadClaim{}, ctx.Err()
	}
	ahead = max(ahead, 0)
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Read the clock once the write lock is held, so a claim that waited
	// for another process's lock does not lease from a stale now.
	now := p.now()
	out, err := p.selectDue(ctx, tx, transport, nanos(now.Add(ahead)), limit)
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("sqlite: claim: %w", err)
	}
	if len(out) == 0 {
		return bus.AheadClaim{Now: now}, nil // the rollback ends the transaction; nothing changed
	}
	until := nanos(now.Add(ahead + lease))
	token := sqlstore.NewToken()
	ids := make([]string, len(out))
	for i := range out {
		ids[i] = out[i].ID
	}
	res, err := tx.ExecContext(ctx, p.q.lease, until, token, idList(ids))
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("sqlite: claim: %w", err)
	}
	if got, err := res.RowsAffected(); err != nil || got != int64(len(out)) {
		return bus.AheadClaim{}, fmt.Errorf("sqlite: claim: leased %d rows of %d selected: %v", got, len(out), err)
	}
	if err := tx.Commit(); err != nil {
		return bus.AheadClaim{}, fmt.Errorf("sqlite: claim: %w", err)
	}
	leaseUntil := fromNanos(until)
	for i := range out {
		out[i].LeaseUntil, out[i].Token = leaseUntil, token
	}
	return bus.AheadClaim{Rows: out, Now: now}, nil
}

func (p *Persistence) selectDue(ctx context.Context, tx *sql.Tx, transport string, now int64, limit int) ([]bus.OutgoingMessage, error) {
	rows, err := tx.QueryContext(ctx, p.q.selectDue, transport, now, limit)
	if err != nil {
		return nil, err
	}
	out, _, err := sqlstore.ScanClaimed(p.dialect, rows, sqlstore.ClaimColumns{}, make([]bus.OutgoingMessage, 0, min(limit, 256)))
	return out, err
}

// now is the store's clock (see StoreNow), without the monotonic reading:
// times are compared as stored Unix nanoseconds.
func (p *Persistence) now() time.Time { return time.Now().Round(0) }

// idList encodes IDs as a JSON array for json_each, so a batch of any size
// is one statement with one parameter.
func idList(ids []string) string {
	b, _ := json.Marshal(ids) // a []string always marshals
	return string(b)
}

// nanos converts a time to the stored Unix nanoseconds. The zero time is 0;
// times outside what int64 nanoseconds can hold (before 1678 or after 2262)
// are clamped, which keeps their order.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Year() < 1678:
		return math.MinInt64
	case t.Year() > 2261:
		return math.MaxInt64
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos; 0 is the zero time.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

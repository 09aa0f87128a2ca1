package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// checkRow refuses a row that cannot be stored: an empty or non-UTF-8
// ID, or no envelope (*InvalidRowError).
func checkRow(m *bus.OutgoingMessage) error {
	return sqlstore.CheckRows([]bus.OutgoingMessage{*m}, storableID, invalidRow)
}

// invalidRow is the *InvalidRowError of a row checkRow refuses.
func invalidRow(_ int, id, reason string) error { return &InvalidRowError{ID: id, Reason: reason} }

// execer runs a statement: the pool, or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insert runs one grouped INSERT (the Grouper's flush).
func (p *Persistence) insert(ctx context.Context, msgs []bus.OutgoingMessage) error {
	return p.insertOn(ctx, p.pool, msgs, true)
}

// insertOn inserts msgs with q (the pool or a transaction), notifying in
// the same transaction when wake is set, notifications are on and a row is
// due soon. In a transaction, a call of copyMinRows rows or more is copied
// in (copyIn).
func (p *Persistence) insertOn(ctx context.Context, q execer, msgs []bus.OutgoingMessage, wake bool) error {
	if tx, ok := q.(pgx.Tx); ok && len(msgs) >= copyMinRows {
		return p.copyIn(ctx, tx, msgs, wake, true)
	}
	ids := make([]string, len(msgs))
	kinds := make([]int16, len(msgs))
	envs := make([][]byte, len(msgs))
	dues := make([]time.Time, len(msgs))
	delays := make([]int64, len(msgs))
	transports := make([]string, len(msgs))
	types := make([]string, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		ids[i], kinds[i], envs[i], dues[i] = m.ID, int16(m.Kind), m.Envelope, m.DueAt
		delays[i], transports[i], types[i] = micros(m.Delay), cleanText(m.Transport), cleanText(m.Type)
	}
	if wake && p.sql.notify != "" && p.dueWithin(msgs) {
		_, err := q.Exec(ctx, p.sql.notify, ids, kinds, envs, dues, delays, transports, types, p.names.channel)
		return err
	}
	_, err := q.Exec(ctx, p.sql.insert, ids, kinds, envs, dues, delays, transports, types)
	return err
}

// micros returns d in whole microseconds, rounded up, so that a positive
// duration stays positive.
func micros(d time.Duration) int64 { return sqlstore.CeilMicros(d) }

// ClaimDueOutgoing locks up to limit rows of transport (and rows stored
// without a transport) that are claimable on the database clock, earliest
// first, under a new random token, and returns them. The rows are locked,
// not written: a transaction of the claim's own, on a connection of the
// pool, holds them (FOR UPDATE SKIP LOCKED, so concurrent claimers never
// wait for or share a row) until DeleteOutgoing, ReleaseOutgoing and
// RecordOutgoingFailures have settled every one of them, and the last of
// these commits it. BEGIN, the transaction's settings and the claim are one
// round trip. The now argument is ignored: due times compare with the
// server's now(), so a skewed client clock cannot make a message early.
// LeaseUntil is the server's now() + lease: the server ends the
// transaction when it has been idle that long (and a grace of a quarter of
// the lease, at most a second), which frees the rows of a process that
// froze or lost its network; a process that dies frees them
// at once, its connection closing. See claims.go.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.claim(ctx, p.sql.claim, p.sql.claimJoin, transport, limit, lease, 0, false)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by the
// server's now() + ahead, held for ahead + lease (bus.AheadClaimer). It
// returns each row's AvailableAt, and as the claim's Now the server's
// clock_timestamp() as the last row left: later than now(), the
// transaction's start, so the caller's estimate of when each row falls
// due is not late by the time the claim took.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	return p.claim(ctx, p.sql.ahead, p.sql.aheadJoin, transport, limit, lease, max(ahead, 0), true)
}

// claim runs a claim statement (p.sql.claim, or p.sql.ahead with its
// window) in a new claim transaction, or joinSQL, the same statement
// leaving out the rows an open claim holds, in that claim's (claims.go).
func (p *Persistence) claim(ctx context.Context, sql, joinSQL, transport string, limit int, lease, ahead time.Duration, withAhead bool) (bus.AheadClaim, error) {
	if limit <= 0 {
		return bus.AheadClaim{}, ctx.Err()
	}
	token := sqlstore.NewToken()
	args := []any{cleanText(transport), limit, micros(lease)}
	if withAhead {
		args = append(args, micros(ahead))
	}
	var now time.Time
	out := make([]bus.OutgoingMessage, 0, min(limit, 1024))
	scan := func(rows sqlstore.Rows) ([]string, error) {
		from := len(out)
		var err error
		var at time.Time
		out, at, err = sqlstore.ScanClaimed(p.dialect, rows, sqlstore.ClaimColumns{LeaseUntil: true, Now: withAhead}, out)
		if at.After(now) {
			now = at
		}
		ids := make([]string, 0, len(out)-from)
		for i := from; i < len(out); i++ {
			out[i].Token = token
			ids = append(ids, out[i].ID)
		}
		return ids, err
	}
	idle := ahead + lease + claimGrace(lease)
	open := func(ctx context.Context) (sqlstore.ClaimConn, []string, error) {
		return p.conns.openClaim(ctx, idle, sql, args, scan)
	}
	if err := p.claims.Claim(ctx, token, idle, open, joinClaim(joinSQL, args, scan)); err != nil {
		return bus.AheadClaim{}, fmt.Errorf("postgres: claim outgoing: %w", err)
	}
	return bus.AheadClaim{Rows: out, Now: now}, nil
}

// claimGrace is how long past its window and lease a claim's transaction
// may idle before the server ends it: a quarter of the lease, at most a
// second, so that the keep-alive of a claim (claims.go) still lands when
// the process was briefly starved of CPU.
func claimGrace(lease time.Duration) time.Duration {
	return min(max(lease, 0)/4, time.Second)
}

// RollbackClaims ends every claim of p that is still open, so that its
// rows are claimable again at once, and closes the connections claims run
// on (claims open new ones when they need them). Claims hold connections
// of their own beside the pool, at most half the pool's MaxConns (at
// least two), so that a hand-over that needs the pool never waits for a
// connection a claim holds. Call it when a process is done with p, or
// when claims may be open (a bus stopped before settling them); the
// settlements of the claims that it ends match no row.
func (p *Persistence) RollbackClaims() {
	p.claims.RollbackAll()
	p.conns.closeAll()
}

// storableID reports whether id can key a row: PostgreSQL text holds
// valid UTF-8 without NUL bytes. IDs are compared byte for byte and never
// cleaned (cleaning would make "msg-\xff" and "msg-\xfe" one row): an ID
// that is not storable is refused where it would be stored, and matches no
// row where it is looked up.
func storableID(id string) bool { return sqlstore.TextID(id) }

// cleanText makes text that is not a key (an error text, a type name)
// storable in a text column.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}

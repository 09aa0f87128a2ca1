package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// StoreOutgoing inserts rows in one transaction, all or none; an ID that
// is already stored keeps its row (ON CONFLICT DO NOTHING), so a retried
// send cannot schedule twice. Rows of concurrent calls are grouped into one
// INSERT (see Options.MaxBatchRows and Options.MaxConcurrentInserts); a
// lone call is one round trip. A call of 1,000 rows or more (such as a
// bus.SendBatch) is stored with COPY in a transaction of its own (see
// copy.go: straight into the table, or through a staging table when some
// IDs are already stored). Unless Options.DisableNotify is set, when the
// earliest row is due within Options.NotifyWithin, the transaction
// notifies Channel with the earliest due time of the new rows. A row with a
// positive Delay is due at the server's time + Delay (now() of the INSERT,
// or of the start of a COPY); otherwise at DueAt. Each row keeps its
// Transport. A row with an empty or non-UTF-8 ID, or no envelope, is an
// *InvalidRowError and nothing is stored. When the connection fails before
// the commit is confirmed, the call checks on another connection whether
// its rows were stored and returns nil if they all were (see indoubt.go).
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for i := range msgs {
		if err := checkRow(&msgs[i]); err != nil {
			return err
		}
	}
	store := p.batch.store
	if len(msgs) >= copyMinRows {
		store = p.storeCopied
	}
	err := store(ctx, msgs)
	if err != nil && inDoubt(err) && ctx.Err() == nil {
		err = p.settleInDoubt(ctx, msgs, err, store) // see indoubt.go
	}
	if err != nil {
		return fmt.Errorf("postgres: store outgoing: %w", err)
	}
	return nil
}

func checkRow(m *bus.OutgoingMessage) error {
	switch {
	case m.ID == "":
		return &InvalidRowError{Reason: "empty ID"}
	case !storableID(m.ID):
		return &InvalidRowError{ID: m.ID, Reason: "ID is not valid UTF-8 text without NUL bytes"}
	case m.Envelope == nil:
		return &InvalidRowError{ID: m.ID, Reason: "no envelope"}
	}
	return nil
}

// execer runs a statement: the pool, or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insert runs one grouped INSERT; the batcher calls it.
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
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

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

// CancelOutgoing removes a row that no claim holds and reports whether it
// did. A row a claim holds locked is being delivered: it stays, and the
// result is false at once (the statement skips the locked row rather than
// waiting for it), as for a row leased by a process of an earlier version
// whose lease is running.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	if !storableID(id) {
		return false, nil // no stored row has it
	}
	tag, err := p.pool.Exec(ctx, p.sql.cancel, id)
	if err != nil {
		return false, fmt.Errorf("postgres: cancel outgoing: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// NextDueOutgoing returns when the earliest row of transport (or without a
// transport) becomes claimable, and false when there is none. It reads the
// first entry of the claim index for each of the two transport values.
func (p *Persistence) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	var next *time.Time
	if err := p.pool.QueryRow(ctx, p.sql.nextDue, cleanText(transport)).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next due outgoing: %w", err)
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}

// StoreNow returns the database's now(), the clock every due, lease and
// retry time of this store is compared on (bus.ClockedStore).
func (p *Persistence) StoreNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := p.pool.QueryRow(ctx, p.sql.now).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("postgres: store now: %w", err)
	}
	return now, nil
}

// storableID reports whether id can key a row: PostgreSQL text holds
// valid UTF-8 without NUL bytes. IDs are compared byte for byte and never
// cleaned (cleaning would make "msg-\xff" and "msg-\xfe" one row): an ID
// that is not storable is refused where it would be stored, and matches no
// row where it is looked up.
func storableID(id string) bool {
	return utf8.ValidString(id) && strings.IndexByte(id, 0) < 0
}

// cleanText makes text that is not a key (an error text, a type name)
// storable in a text column.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}

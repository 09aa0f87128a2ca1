package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
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
	token := newToken()
	args := []any{cleanText(transport), limit, micros(lease)}
	if withAhead {
		args = append(args, micros(ahead))
	}
	var now, rowNow time.Time
	out := make([]bus.OutgoingMessage, 0, min(limit, 1024))
	scan := func(rows pgx.Rows) (string, error) {
		var m bus.OutgoingMessage
		var kind int16
		var failures int32
		dest := []any{&m.ID, &kind, &m.Envelope, &m.DueAt, &m.LeaseUntil, &failures, &m.LastError, &m.Transport, &m.Type, &m.AvailableAt}
		if withAhead {
			dest = append(dest, &rowNow)
		}
		if err := rows.Scan(dest...); err != nil {
			return "", err
		}
		if rowNow.After(now) {
			now = rowNow
		}
		m.Kind, m.Failures, m.Token = bus.Kind(kind), int(failures), token
		out = append(out, m)
		return m.ID, nil
	}
	if _, err := p.claims.begin(ctx, ahead+lease+claimGrace(lease), token, sql, joinSQL, args, scan); err != nil {
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

// newToken returns a random 128-bit claim token in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	return hex.EncodeToString(b[:])
}

// DeleteOutgoing removes the claimed rows that their claims still hold, in
// each claim's transaction, and returns how many it removed. The
// settlement that leaves a claim with no row to settle commits it in the
// same round trip; until then nothing is committed. When that commit
// fails (the connection was lost), the error is returned and the rows,
// not removed, are claimable again: they are delivered again under the
// same message IDs. Unknown tokens, rows not named by their claim, and
// claims whose lease lapsed (the server ended their transaction) match no
// row.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleClaims(ctx, settleDelete, claims, nil)
	if err != nil {
		return n, fmt.Errorf("postgres: delete outgoing: %w", err)
	}
	return n, nil
}

// ReleaseOutgoing gives back the claimed rows that their claims still
// hold, counting no failure, and returns how many it released. The rows
// are not written: each is claimable again when it was before its claim
// (its due time, or the end of a failure's backoff) once its claim's
// transaction ends, which the settlement of the claim's last row does.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleClaims(ctx, settleRelease, claims, nil)
	if err != nil {
		return n, fmt.Errorf("postgres: release outgoing: %w", err)
	}
	return n, nil
}

// RecordOutgoingFailures counts a failure on each row its claim still
// holds, keeps the error text, and makes the row claimable again at the
// server's statement time + RetryAfter (or at RetryAt when RetryAfter is
// not positive), in the claim's transaction. It returns how many rows it
// changed. Error text is made valid UTF-8 without NUL bytes, as PostgreSQL
// text requires.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	claims := make([]bus.Claim, len(failures))
	for i, f := range failures {
		claims[i] = bus.Claim{ID: f.ID, Token: f.Token}
	}
	n, err := p.settleClaims(ctx, settleFail, claims, failures)
	if err != nil {
		return n, fmt.Errorf("postgres: record outgoing failures: %w", err)
	}
	return n, nil
}

// settleClaims settles claims, grouped by token, each group in its
// claim's transaction, the groups at once (failures, when kind is
// settleFail, parallels claims). It returns the rows settled and the first
// error.
func (p *Persistence) settleClaims(ctx context.Context, kind settleKind, claims []bus.Claim, failures []bus.OutgoingFailure) (int, error) {
	if len(claims) == 0 {
		return 0, ctx.Err()
	}
	groups := map[string][]int{}
	var order []string
	for i, c := range claims {
		if _, ok := groups[c.Token]; !ok {
			order = append(order, c.Token)
		}
		groups[c.Token] = append(groups[c.Token], i)
	}
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
	)
	for _, token := range order {
		c := p.claims.get(token)
		if c == nil {
			continue // unknown, settled or lapsed: holds no row
		}
		idx := groups[token]
		ids := make([]string, len(idx))
		for j, i := range idx {
			ids[j] = claims[i].ID
		}
		var sql string
		var args func(keep []int) []any
		switch kind {
		case settleDelete:
			sql = p.sql.delete
			args = func(keep []int) []any {
				kept := make([]string, len(keep))
				for j, k := range keep {
					kept[j] = ids[k]
				}
				return []any{kept}
			}
		case settleFail:
			sql = p.sql.failures
			args = func(keep []int) []any {
				kept := make([]string, len(keep))
				errs := make([]string, len(keep))
				after := make([]int64, len(keep))
				retry := make([]time.Time, len(keep))
				for j, k := range keep {
					f := &failures[idx[k]]
					kept[j], errs[j], after[j], retry[j] = ids[k], cleanText(f.Error), micros(f.RetryAfter), f.RetryAt
				}
				return []any{kept, errs, after, retry}
			}
		}
		wg.Go(func() {
			n, err := c.settle(ctx, kind, ids, sql, args)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if err != nil && first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	return total, first
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
	p.claims.rollbackAll()
	p.claims.conns.closeAll()
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

package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// Bounds of one multi-row INSERT: rows, and envelope bytes, so a
// statement stays far below max_allowed_packet (16 MiB by default on
// MariaDB, 64 MiB on MySQL 8).
const (
	insertChunk      = 500
	insertChunkBytes = 4 << 20
)

// maxLastError bounds the error text kept on a row (last_error).
const maxLastError = 4096

// StoreOutgoing inserts rows in one transaction, in multi-row statements,
// so a batch is stored all or none. The rows of concurrent calls share
// their INSERTs and commits (group commit, at most 2 at once and 2,000
// rows each; a failure fails every call of the group, none of whose rows
// is then stored). An ID that is already stored keeps its row (ON DUPLICATE
// KEY UPDATE id = id), so a retried send cannot schedule twice. A row
// with a Delay is due Delay after the server's UTC_TIMESTAMP(6) at the
// statement; otherwise at its DueAt. A row with an empty ID or no
// envelope fails the call (bus.ErrInvalidMessage) before anything is
// stored, and so does a row that cannot fit in one INSERT under the server's
// max_allowed_packet (*RowTooLargeError). IDs compare byte for byte. When
// the connection fails before the commit is confirmed, the call checks on
// another connection whether its rows were stored and returns nil if they
// all were (see indoubt.go).
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	if err := checkRows(msgs); err != nil {
		return err
	}
	if err := p.checkSizes(ctx, msgs); err != nil {
		return fmt.Errorf("mysql: store: %w", err)
	}
	err := p.group.store(ctx, msgs)
	if err != nil && inDoubt(err) && ctx.Err() == nil {
		err = p.settleInDoubt(ctx, msgs, err) // see indoubt.go
	}
	if err != nil {
		return fmt.Errorf("mysql: store: %w", err)
	}
	return nil
}

// flushRows stores rows in one autocommitted statement when they fit in
// one, else in one transaction.
func (p *Persistence) flushRows(ctx context.Context, rows []bus.OutgoingMessage) error {
	if budget, bounded := p.packetBudget(ctx); chunkEnd(rows, 0, budget, bounded) == len(rows) {
		return p.insertRows(ctx, p.db, rows)
	}
	return p.inTx(ctx, func(tx *sql.Tx) error { return p.insertRows(ctx, tx, rows) })
}

// chunkEnd returns the end of the statement that inserts msgs from start:
// at most insertChunk rows and insertChunkBytes of envelopes, within
// budget (the server's max_allowed_packet less a statement's overhead)
// when bounded; always at least one row.
func chunkEnd(msgs []bus.OutgoingMessage, start, budget int, bounded bool) int {
	end, size, worst := start, 0, 0
	for end < len(msgs) && end-start < insertChunk {
		m := &msgs[end]
		if end > start && (size+len(m.Envelope) > insertChunkBytes || bounded && worst+worstRowSize(m) > budget) {
			break
		}
		size += len(m.Envelope)
		worst += worstRowSize(m)
		end++
	}
	return end
}

// checkRows refuses rows that cannot be stored: an empty ID or no
// envelope.
func checkRows(msgs []bus.OutgoingMessage) error {
	for i := range msgs {
		if msgs[i].ID == "" || msgs[i].Envelope == nil {
			return fmt.Errorf("mysql: store: row %d (%q): %w: empty ID or no envelope", i, msgs[i].ID, bus.ErrInvalidMessage)
		}
	}
	return nil
}

// execer is what *sql.DB and *sql.Tx have in common here.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// insertRows inserts msgs on db in multi-row statements of at most
// insertChunk rows and insertChunkBytes of envelopes, each within the
// server's max_allowed_packet (a row that cannot fit in one is a
// *RowTooLargeError, and nothing is sent).
func (p *Persistence) insertRows(ctx context.Context, db execer, msgs []bus.OutgoingMessage) error {
	if err := checkRows(msgs); err != nil {
		return err
	}
	if err := p.checkSizes(ctx, msgs); err != nil {
		return err
	}
	budget, bounded := p.packetBudget(ctx)
	args := make([]any, 0, insertParams*min(len(msgs), insertChunk))
	for start := 0; start < len(msgs); {
		args = args[:0]
		end := chunkEnd(msgs, start, budget, bounded)
		for i := start; i < end; i++ {
			m := &msgs[i]
			base, rel := micros(m.DueAt), false
			if m.Delay > 0 {
				base, rel = durMicros(m.Delay), true
			}
			args = append(args, []byte(m.ID), int64(m.Kind), m.Envelope, base, rel, []byte(m.Transport), []byte(m.Type))
		}
		q := p.q.insertHead + strings.TrimSuffix(strings.Repeat(insertRow+", ", end-start), ", ") + p.q.insertTail
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// deadlockRetries is how often inTx runs a transaction that InnoDB chose
// as a deadlock victim (the whole transaction was rolled back).
const deadlockRetries = 3

// inTx runs fn in one READ COMMITTED transaction and commits it. A
// transaction that InnoDB rolled back as a deadlock victim runs again, up
// to deadlockRetries times: fn must start from scratch on each call. Under
// load, claims, settles and inserts on the claim index can deadlock with
// one another although SKIP LOCKED keeps claims from waiting on rows.
func (p *Persistence) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	var err error
	for range deadlockRetries {
		if err = p.inTxOnce(ctx, fn); !isDeadlock(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (p *Persistence) inTxOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// ClaimDueOutgoing leases up to limit rows of transport (and rows stored
// without a transport) that are claimable at the server's now, earliest
// first, until now+lease, under a new lease token. The now argument is
// not used: the store compares on its own clock (see StoreNow).
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.ClaimOutgoingAhead(ctx, transport, time.Time{}, 0, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by the
// server's now + ahead, leased until now + ahead + lease
// (bus.AheadClaimer). One READ COMMITTED transaction selects the rows
// with FOR UPDATE SKIP LOCKED, one ordered range of the claim index per
// transport value, so concurrent claimers in any process never wait for
// or share a row, and leases them. It returns the server's now of the
// select with the rows, and each row's AvailableAt.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	p.noteTransport(transport)
	if limit <= 0 {
		return bus.AheadClaim{}, ctx.Err()
	}
	aheadUS := durMicros(max(ahead, 0))
	var out []bus.OutgoingMessage
	var now int64
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		tr := []byte(transport)
		out, now, err = scanClaimed(tx.QueryContext(ctx, p.q.claim, tr, aheadUS, limit, tr, aheadUS, limit, limit))
		if err != nil || len(out) == 0 {
			return err
		}
		until := now + aheadUS + durMicros(lease)
		args := make([]any, 0, 3+len(out))
		args = append(args, until, until, []byte(newToken()))
		for i := range out {
			args = append(args, []byte(out[i].ID))
		}
		res, err := tx.ExecContext(ctx, p.q.leaseHead+inList(len(out)), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(out)) {
			return fmt.Errorf("leased %d rows of %d selected: %v", n, len(out), err)
		}
		token, leaseUntil := string(args[2].([]byte)), fromMicros(until)
		for i := range out {
			out[i].Token, out[i].LeaseUntil = token, leaseUntil
		}
		return nil
	})
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("mysql: claim: %w", err)
	}
	c := bus.AheadClaim{Rows: out}
	if len(out) > 0 {
		c.Now = fromMicros(now)
	}
	return c, nil
}

// scanClaimed reads the rows of the claim's select, and the server's now
// of the select.
func scanClaimed(rows *sql.Rows, err error) ([]bus.OutgoingMessage, int64, error) {
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = rows.Close() }()
	var out []bus.OutgoingMessage
	var now int64
	for rows.Next() {
		var (
			m                           bus.OutgoingMessage
			id, tr, typ                 []byte
			kind, due, available, nowUS int64
		)
		if err := rows.Scan(&id, &kind, &m.Envelope, &due, &m.Failures, &m.LastError, &tr, &typ, &available, &nowUS); err != nil {
			return nil, 0, err
		}
		m.ID, m.Transport, m.Type = string(id), string(tr), string(typ)
		m.Kind, m.DueAt, m.AvailableAt = bus.Kind(kind), fromMicros(due), fromMicros(available)
		if m.Envelope == nil {
			m.Envelope = []byte{}
		}
		now = nowUS
		out = append(out, m)
	}
	return out, now, rows.Err()
}

// DeleteOutgoing removes the claimed rows that their lease tokens still
// hold and returns how many it removed. A row re-claimed by someone else,
// cancelled, stored again, or unknown is left alone.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleByToken(ctx, p.q.deleteHead, claims)
	if err != nil {
		return n, fmt.Errorf("mysql: delete: %w", err)
	}
	return n, nil
}

// ReleaseOutgoing ends the leases of the claimed rows that their tokens
// still hold, without counting a failure, and returns how many it
// released. Each row is claimable again when it was before its claim.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleByToken(ctx, p.q.releaseHd, claims)
	if err != nil {
		return n, fmt.Errorf("mysql: release: %w", err)
	}
	return n, nil
}

// settleChunk bounds the IDs of one settling statement.
const settleChunk = 1000

// settleByToken runs head (parameters: a token, then an IN list of IDs)
// per distinct token and chunk of IDs. A dispatcher settles the rows of
// one claim, so that is usually one autocommitted statement; more run in
// one transaction.
func (p *Persistence) settleByToken(ctx context.Context, head string, claims []bus.Claim) (int, error) {
	var order []string
	byToken := map[string][]string{}
	for _, c := range claims {
		if c.Token == "" {
			continue // never a claim's token: it holds nothing
		}
		if _, ok := byToken[c.Token]; !ok {
			order = append(order, c.Token)
		}
		byToken[c.Token] = append(byToken[c.Token], c.ID)
	}
	run := func(db execer) (int, error) {
		total := 0
		for _, token := range order {
			ids := byToken[token]
			for len(ids) > 0 {
				chunk := ids[:min(len(ids), settleChunk)]
				ids = ids[len(chunk):]
				args := make([]any, 0, 1+len(chunk))
				args = append(args, []byte(token))
				for _, id := range chunk {
					args = append(args, []byte(id))
				}
				n, err := execCount(ctx, db, head+inList(len(chunk)), args...)
				if err != nil {
					return 0, err
				}
				total += n
			}
		}
		return total, nil
	}
	switch {
	case len(order) == 0:
		return 0, ctx.Err()
	case len(order) == 1 && len(byToken[order[0]]) <= settleChunk:
		n, err := run(p.db)
		for i := 1; i < deadlockRetries && isDeadlock(err) && ctx.Err() == nil; i++ {
			n, err = run(p.db)
		}
		return n, err
	}
	total := 0
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		total, err = run(tx)
		return err
	})
	return total, err
}

// RecordOutgoingFailures counts a failure on each row its token still
// holds, keeps the error text, ends the lease, and makes the row claimable
// again RetryAfter after the server's now (at RetryAt when RetryAfter is
// not positive), in one transaction. It returns how many rows it changed.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	if len(failures) == 0 {
		return 0, ctx.Err()
	}
	total := 0
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		total = 0
		for _, f := range failures {
			if f.Token == "" {
				continue
			}
			after := durMicros(f.RetryAfter)
			n, err := execCount(ctx, tx, p.q.failure, cleanText(f.Error, maxLastError), after, after, micros(f.RetryAt),
				[]byte(f.ID), []byte(f.Token))
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mysql: record failures: %w", err)
	}
	return total, nil
}

// NextDueOutgoing returns when the earliest row of transport (or without
// a transport) becomes claimable, and false when there is none: one probe
// of the claim index per transport value.
func (p *Persistence) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	p.noteTransport(transport)
	t, ok, err := p.nextDue(ctx, transport)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mysql: next due: %w", err)
	}
	return t, ok, nil
}

func (p *Persistence) nextDue(ctx context.Context, transport string) (time.Time, bool, error) {
	var own, legacy sql.NullInt64
	tr := []byte(transport)
	if err := p.db.QueryRowContext(ctx, p.q.nextDue, tr, tr).Scan(&own, &legacy); err != nil {
		return time.Time{}, false, err
	}
	switch {
	case own.Valid && (!legacy.Valid || own.Int64 <= legacy.Int64):
		return fromMicros(own.Int64), true, nil
	case legacy.Valid:
		return fromMicros(legacy.Int64), true, nil
	}
	return time.Time{}, false, nil
}

// CancelOutgoing removes a row that no claim holds, and reports whether it
// did. A row whose lease is running at the server's now is being
// delivered: it stays, and the result is false.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	n, err := execCount(ctx, p.db, p.q.cancel, []byte(id))
	if err != nil {
		return false, fmt.Errorf("mysql: cancel: %w", err)
	}
	return n > 0, nil
}

// Len returns the number of stored rows, leased or not.
func (p *Persistence) Len(ctx context.Context) (int, error) {
	var n int
	if err := p.db.QueryRowContext(ctx, p.q.count).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count: %w", err)
	}
	return n, nil
}

// execCount runs one statement and returns how many rows it changed.
func execCount(ctx context.Context, db execer, stmt string, args ...any) (int, error) {
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// newToken returns a new lease token: 128 random bits in hex, so no two
// claims, in any process, share one.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// cleanText makes s valid UTF-8 and cuts it to at most limit bytes, for
// the utf8mb4 free-text columns.
func cleanText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

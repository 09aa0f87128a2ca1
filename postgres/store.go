package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
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

// ClaimDueOutgoing leases up to limit rows of transport (and rows stored
// without a transport) that are claimable on the database clock, earliest
// first, under a new random lease token, in one statement (FOR UPDATE SKIP
// LOCKED, so concurrent claimers never wait for or share a row) that
// commits at once: no transaction is held while the caller sends. The now
// argument is ignored: due and lease times compare with the server's
// now(), so a skewed client clock cannot make a message early, and the
// lease runs until the server's now() + lease.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.claim(ctx, p.sql.claim, transport, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by the
// server's now() + ahead, leased until now() + ahead + lease, in the same
// one statement (bus.AheadClaimer). It returns each row's AvailableAt, and
// as the claim's Now the server's clock_timestamp() as the last row left:
// later than now(), the statement's start, so the caller's estimate of when
// each row falls due is not late by the time the leasing took.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	return p.claim(ctx, p.sql.ahead, transport, limit, lease, micros(ahead))
}

// claim runs a claim statement (p.sql.claim, or p.sql.ahead with its
// window as the extra argument).
func (p *Persistence) claim(ctx context.Context, sql, transport string, limit int, lease time.Duration, extra ...any) (bus.AheadClaim, error) {
	if limit <= 0 {
		return bus.AheadClaim{}, ctx.Err()
	}
	token := newToken()
	rows, err := p.pool.Query(ctx, sql, append([]any{cleanText(transport), limit, micros(lease), token}, extra...)...)
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("postgres: claim outgoing: %w", err)
	}
	defer rows.Close()
	var now, rowNow time.Time
	out := make([]bus.OutgoingMessage, 0, min(limit, 1024))
	for rows.Next() {
		var m bus.OutgoingMessage
		var kind int16
		var failures int32
		dest := []any{&m.ID, &kind, &m.Envelope, &m.DueAt, &m.LeaseUntil, &failures, &m.LastError, &m.Transport, &m.Type, &m.AvailableAt}
		if len(extra) > 0 {
			dest = append(dest, &rowNow)
		}
		if err := rows.Scan(dest...); err != nil {
			return bus.AheadClaim{}, fmt.Errorf("postgres: claim outgoing: %w", err)
		}
		if rowNow.After(now) {
			now = rowNow
		}
		m.Kind, m.Failures, m.Token = bus.Kind(kind), int(failures), token
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return bus.AheadClaim{}, fmt.Errorf("postgres: claim outgoing: %w", err)
	}
	// RETURNING has no order; restore the claim order.
	slices.SortFunc(out, func(a, b bus.OutgoingMessage) int {
		return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), strings.Compare(a.ID, b.ID))
	})
	return bus.AheadClaim{Rows: out, Now: now}, nil
}

// newToken returns a random 128-bit lease token in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	return hex.EncodeToString(b[:])
}

// DeleteOutgoing removes the claimed rows whose lease tokens still hold
// them, in one statement, and returns how many it removed. Unknown IDs and
// rows claimed again under another token are left alone.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settle(ctx, p.sql.delete, claims)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete outgoing: %w", err)
	}
	return n, nil
}

// ReleaseOutgoing ends the leases of the claimed rows whose tokens still
// hold them, counting no failure, in one statement, and returns how many
// it released. Each row is claimable again when it was before its claim
// (prior_available_at: its due time, or the end of a failure's backoff).
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settle(ctx, p.sql.release, claims)
	if err != nil {
		return 0, fmt.Errorf("postgres: release outgoing: %w", err)
	}
	return n, nil
}

func (p *Persistence) settle(ctx context.Context, sql string, claims []bus.Claim) (int, error) {
	if len(claims) == 0 {
		return 0, ctx.Err()
	}
	ids := make([]string, 0, len(claims))
	tokens := make([]string, 0, len(claims))
	for _, c := range claims {
		if storableID(c.ID) && storableID(c.Token) { // any other matches no row
			ids, tokens = append(ids, c.ID), append(tokens, c.Token)
		}
	}
	tag, err := p.pool.Exec(ctx, sql, ids, tokens)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// RecordOutgoingFailures counts a failure on each row its lease token still
// holds, keeps the error text, ends the lease, and makes the row claimable
// again at the server's now() + RetryAfter (or at RetryAt when RetryAfter
// is not positive), in one statement. It returns how many rows it changed.
// Error text is made valid UTF-8 without NUL bytes, as PostgreSQL text
// requires.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	if len(failures) == 0 {
		return 0, ctx.Err()
	}
	ids := make([]string, 0, len(failures))
	tokens := make([]string, 0, len(failures))
	errs := make([]string, 0, len(failures))
	after := make([]int64, 0, len(failures))
	retry := make([]time.Time, 0, len(failures))
	for _, f := range failures {
		if !storableID(f.ID) || !storableID(f.Token) {
			continue // matches no row
		}
		ids, tokens, errs = append(ids, f.ID), append(tokens, f.Token), append(errs, cleanText(f.Error))
		after, retry = append(after, micros(f.RetryAfter)), append(retry, f.RetryAt)
	}
	tag, err := p.pool.Exec(ctx, p.sql.failures, ids, tokens, errs, after, retry)
	if err != nil {
		return 0, fmt.Errorf("postgres: record outgoing failures: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// CancelOutgoing removes a row that is not leased and reports whether it
// did. A row whose lease is running on the server's clock is being
// delivered: it stays, and the result is false.
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

package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
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
func checkRows(msgs []bus.OutgoingMessage) error { return sqlstore.CheckRows(msgs, nil, invalidRow) }

// invalidRow is the error of a row checkRows refuses.
func invalidRow(i int, id, reason string) error {
	return fmt.Errorf("mysql: store: row %d (%q): %w: %s", i, id, bus.ErrInvalidMessage, reason)
}

// execer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type execer = sqlstore.SQLExecer

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
	for start := 0; start < len(msgs); {
		end := chunkEnd(msgs, start, budget, bounded)
		if err := p.insertChunk(ctx, db, msgs[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// insertConflictRetries bounds the retries of an INSERT that met a row
// locked by another transaction.
const insertConflictRetries = 5

// insertChunk inserts rows in one statement that never waits for a row
// lock (MariaDB: innodb_lock_wait_timeout 0 for the statement; MySQL,
// whose least is 1 s: that). A stored ID whose row a claim holds is being
// delivered: the row is left out, as a stored ID is, and the others are
// inserted again. A row another transaction is inserting under the same
// ID is waited for by retrying, a few times.
func (p *Persistence) insertChunk(ctx context.Context, db execer, rows []bus.OutgoingMessage) error {
	mode, err := p.idleMode(ctx, db)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		args := make([]any, 0, insertParams*len(rows))
		for i := range rows {
			m := &rows[i]
			base, rel := micros(m.DueAt), false
			if m.Delay > 0 {
				base, rel = durMicros(m.Delay), true
			}
			args = append(args, []byte(m.ID), int64(m.Kind), m.Envelope, base, rel, []byte(m.Transport), []byte(m.Type))
		}
		head := p.q.insertHead
		if mode == idleWait {
			head = strings.Replace(head, "INSERT ", "INSERT /*+ SET_VAR(innodb_lock_wait_timeout = 1) */ ", 1)
		} else {
			head = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR " + head
		}
		q := head + strings.TrimSuffix(strings.Repeat(insertRow+", ", len(rows)), ", ") + p.q.insertTail
		_, err := db.ExecContext(ctx, q, args...)
		if !isLockWait(err) || attempt == insertConflictRetries {
			return err
		}
		free, err := p.withoutHeld(ctx, db, rows)
		if err != nil {
			return err
		}
		if len(free) == 0 {
			return nil
		}
		if len(free) == len(rows) { // another transaction inserts one of the IDs: wait for it
			t := time.NewTimer(time.Duration(5<<attempt) * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		rows = free
	}
}

// isLockWait reports ER_LOCK_WAIT_TIMEOUT: the statement (not the
// transaction) was rolled back.
func isLockWait(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}

// withoutHeld returns rows without those whose ID is stored and locked by
// another transaction (a claim holds it).
func (p *Persistence) withoutHeld(ctx context.Context, db execer, rows []bus.OutgoingMessage) ([]bus.OutgoingMessage, error) {
	args := make([]any, len(rows))
	for i := range rows {
		args[i] = []byte(rows[i].ID)
	}
	list := inList(len(rows))
	stored, err := idSet(db.QueryContext(ctx, "SELECT id FROM "+p.n.table+" WHERE id IN "+list, args...))
	if err != nil {
		return nil, err
	}
	free, err := idSet(db.QueryContext(ctx, "SELECT id FROM "+p.n.table+" FORCE INDEX (PRIMARY) WHERE id IN "+list+" FOR UPDATE SKIP LOCKED", args...))
	if err != nil {
		return nil, err
	}
	out := make([]bus.OutgoingMessage, 0, len(rows))
	for _, m := range rows {
		if _, ok := stored[m.ID]; ok {
			if _, unlocked := free[m.ID]; !unlocked {
				continue // held by a claim: being delivered
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// idSet reads a column of IDs.
func idSet(rows *sql.Rows, err error) (map[string]struct{}, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := map[string]struct{}{}
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[string(id)] = struct{}{}
	}
	return out, rows.Err()
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

// ClaimDueOutgoing claims up to limit rows of transport (and rows stored
// without a transport) that are claimable at the server's now, earliest
// first, for lease, under a new token. The now argument is not used: the
// store compares on its own clock (see StoreNow).
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.ClaimOutgoingAhead(ctx, transport, time.Time{}, 0, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by the
// server's now + ahead, held until now + ahead + lease
// (bus.AheadClaimer). A READ COMMITTED transaction selects the rows with
// FOR UPDATE SKIP LOCKED, one ordered range of the claim index per
// transport value, and stays open: the rows stay locked, unchanged, so
// concurrent claimers in any process skip them, until the claim's rows
// are settled, its lease ends, or its connection is lost (claims.go). It
// returns the server's now of the select with the rows, and each row's
// AvailableAt. When the store's claim transactions already take half the
// pool (claims.go), a claim that finds no slot within 50 ms returns no
// rows.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	p.noteTransport(transport)
	if limit <= 0 {
		return bus.AheadClaim{}, ctx.Err()
	}
	c, err := p.claim(ctx, transport, max(ahead, 0), limit, lease)
	if err != nil {
		return bus.AheadClaim{}, fmt.Errorf("mysql: claim: %w", err)
	}
	return c, nil
}

// claimRounds bounds the rounds of a claim whose rows other processes'
// claims hold: each round looks past the rows the one before found held.
const claimRounds = 3

func (p *Persistence) claim(ctx context.Context, transport string, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	token := sqlstore.NewToken()
	var out []bus.OutgoingMessage
	var now time.Time
	aheadUS, tr := durMicros(ahead), []byte(transport)
	open := func(ctx context.Context) (sqlstore.ClaimConn, []string, error) {
		conn, err := p.db.Conn(ctx)
		if err != nil {
			return nil, nil, err
		}
		c := &claimConn{conn: conn}
		began := false
		fail := func(err error) (sqlstore.ClaimConn, []string, error) {
			discard(conn)
			return nil, nil, err
		}
		skip := map[string]struct{}{} // rows looked at by an earlier round
		for round := 0; round < claimRounds && len(out) < limit; round++ {
			want := limit - len(out)
			cands, more, err := p.candidates(ctx, conn, tr, aheadUS, want, skip)
			if err != nil {
				return fail(err)
			}
			if len(cands) == 0 {
				break
			}
			if !began {
				if c.mode, err = p.idleMode(ctx, conn); err != nil {
					return fail(err)
				}
				if _, err := conn.ExecContext(ctx, claimSessionSQL(c.mode, idleSeconds(ahead, lease))); err != nil {
					return fail(err)
				}
				began = true
			}
			args := make([]any, 0, 2+len(cands))
			args = append(args, aheadUS, tr)
			for _, cd := range cands {
				args = append(args, cd.id)
			}
			rows, err := conn.QueryContext(ctx, p.q.lockHead+inList(len(cands))+" FOR UPDATE SKIP LOCKED", args...)
			if err != nil {
				return fail(err)
			}
			from := len(out)
			var at time.Time
			if out, at, err = sqlstore.ScanClaimed(p.dialect, rows, sqlstore.ClaimColumns{Now: true}, out); err != nil {
				return fail(err)
			}
			if at.After(now) {
				now = at
			}
			if len(out)-from == len(cands) || !more {
				break // none was held by another claim, or there is no more
			}
			// The next round looks past these rows: those another claim
			// holds, and those this claim locked (which its own SELECT would
			// return again).
			for _, cd := range cands {
				skip[string(cd.id)] = struct{}{}
			}
		}
		if len(out) == 0 {
			if began {
				if err := c.end(ctx); err != nil {
					discard(conn)
					return nil, nil, err
				}
			}
			return nil, nil, conn.Close()
		}
		ids := make([]string, len(out))
		for i := range out {
			ids[i] = out[i].ID
		}
		return c, ids, nil
	}
	if err := p.claims.Claim(ctx, token, ahead+lease, open, nil); err != nil || len(out) == 0 {
		return bus.AheadClaim{}, err
	}
	slices.SortFunc(out, func(a, b bus.OutgoingMessage) int {
		return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), strings.Compare(a.ID, b.ID))
	})
	leaseUntil := now.Add(time.Duration(aheadUS+durMicros(lease)) * time.Microsecond)
	for i := range out {
		out[i].Token, out[i].LeaseUntil = token, leaseUntil
	}
	return bus.AheadClaim{Rows: out, Now: now}, nil
}

// candidate is a row a claim looked at: its ID and available_at.
type candidate struct {
	id []byte
	av int64
}

// candidates returns up to want rows claimable by the server's now +
// ahead, earliest first, that no claim of this store holds and that are
// not in skip, read without locks; more reports that the read may have
// stopped before the last such row.
func (p *Persistence) candidates(ctx context.Context, conn *sql.Conn, tr []byte, aheadUS int64, want int, skip map[string]struct{}) ([]candidate, bool, error) {
	read := want + p.claims.HeldCount() + len(skip)
	rows, err := conn.QueryContext(ctx, p.q.candidates, tr, aheadUS, read, tr, aheadUS, read, read)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = rows.Close() }()
	var out []candidate
	seen := 0
	for rows.Next() {
		var cd candidate
		if err := rows.Scan(&cd.id, &cd.av); err != nil {
			return nil, false, err
		}
		seen++
		if _, skipped := skip[string(cd.id)]; len(out) < want && !skipped && !p.claims.Held(string(cd.id)) {
			out = append(out, cd)
		}
	}
	return out, seen == read, rows.Err()
}

// cancelIn1 deletes the row id in tx if it can lock it at once and no
// earlier version's lease runs on it: 1 if it did.
func (p *Persistence) cancelIn1(ctx context.Context, tx execer, id string) (int, error) {
	if ok, err := p.lockFree(ctx, tx, id); err != nil || !ok {
		return 0, err
	}
	return sqlstore.ExecCount(ctx, tx, p.q.cancel, []byte(id))
}

// lockFree locks the row id in tx if no transaction holds it (FOR UPDATE
// SKIP LOCKED: never waiting) and no earlier version's lease runs on it,
// and reports whether it did.
func (p *Persistence) lockFree(ctx context.Context, tx execer, id string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, p.q.lockFree, []byte(id)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
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

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// Claims hold their rows locked, not leased (sqlstore.LockedClaims, with
// a keep-alive). A claim takes a connection of its own (see claimConns)
// and runs, in one round trip, BEGIN, the transaction's settings
// (idle_in_transaction_session_timeout, set for the claim's transaction
// only, so the server ends a frozen process's claim after the window, the
// lease and a grace) and the claim statement. A row is thus inserted,
// locked and deleted: no new row version and no index entry for the claim.
// When every slot is taken, a claim joins the youngest open claim under a
// savepoint.

// lockedClaims are the open claims of a Persistence (claims.go).
type lockedClaims = sqlstore.LockedClaims

// settler is DeleteOutgoing, ReleaseOutgoing and RecordOutgoingFailures.
type settler = sqlstore.Settler

// slotWait is how long a claim waits for a slot before it returns no row.
const slotWait = 100 * time.Millisecond

// claimSlots is how many claim transactions a Persistence keeps open at
// once, each on a connection of its own beside the pool: half the pool's
// size, at least two.
func claimSlots(pool *pgxpool.Pool) int {
	return max(2, int(pool.Config().MaxConns)/2)
}

// newClaims returns the claim registry of p and its settling methods.
func newClaims(p *Persistence, d *sqlstore.Dialect) (*lockedClaims, *settler) {
	reg := sqlstore.NewLockedClaims(d, sqlstore.LockedSQL{
		Delete: func(ids []string) []sqlstore.Stmt { return []sqlstore.Stmt{{Query: p.sql.delete, Args: []any{ids}}} },
		Fail: func(fs []bus.OutgoingFailure) []sqlstore.Stmt {
			ids, errs := make([]string, len(fs)), make([]string, len(fs))
			after, retry := make([]int64, len(fs)), make([]time.Time, len(fs))
			for i, f := range fs {
				ids[i], errs[i], after[i], retry[i] = f.ID, cleanText(f.Error), micros(f.RetryAfter), f.RetryAt
			}
			return []sqlstore.Stmt{{Query: p.sql.failures, Args: []any{ids, errs, after, retry}}}
		},
	}, sqlstore.LockedConfig{Slots: func() int { return claimSlots(p.pool) }, SlotWait: slotWait, KeepAlive: true, Log: p.log})
	return reg, reg.Settler(sqlstore.SettleOps{Delete: "delete outgoing", Release: "release outgoing", Fail: "record outgoing failures"})
}

// claimConns are the connections claims run on, kept apart from the pool:
// a claim holds its connection while the dispatcher hands its rows over,
// and a hand-over that needs a connection of the pool (the PostgreSQL
// transport on the same pool, an outbox) must never wait for one that a
// claim holds while the claim waits for the hand-over. At most one per
// slot is open; idle ones are kept for the next claim.
type claimConns struct {
	cfg  *pgx.ConnConfig
	mu   sync.Mutex
	idle []*pgx.Conn
}

// get returns an idle connection, or opens one.
func (cc *claimConns) get(ctx context.Context) (*pgx.Conn, error) {
	cc.mu.Lock()
	if n := len(cc.idle); n > 0 {
		conn := cc.idle[n-1]
		cc.idle = cc.idle[:n-1]
		cc.mu.Unlock()
		return conn, nil
	}
	cc.mu.Unlock()
	return pgx.ConnectConfig(ctx, cc.cfg.Copy())
}

// put keeps conn for the next claim when it is usable and outside a
// transaction; it closes it otherwise.
func (cc *claimConns) put(conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		closeConn(conn)
		return
	}
	cc.mu.Lock()
	cc.idle = append(cc.idle, conn)
	cc.mu.Unlock()
}

// closeAll closes the idle connections.
func (cc *claimConns) closeAll() {
	cc.mu.Lock()
	idle := cc.idle
	cc.idle = nil
	cc.mu.Unlock()
	for _, conn := range idle {
		closeConn(conn)
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// claimConn is a claim's transaction on a connection of claimConns
// (sqlstore.ClaimConn).
type claimConn struct {
	cc   *claimConns
	conn *pgx.Conn
}

// idleMillis is the idle limit of a claim's transaction in whole
// milliseconds, rounded up, within the setting's range.
func idleMillis(d time.Duration) int64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return min(max(int64(ms), 1), math.MaxInt32)
}

// openClaim takes a connection and runs, in one round trip, BEGIN, the
// transaction's settings and the claim statement, whose rows scan reads.
// With no row it ends the transaction and returns a nil connection.
func (cc *claimConns) openClaim(ctx context.Context, idle time.Duration, sql string, args []any, scan func(sqlstore.Rows) ([]string, error)) (sqlstore.ClaimConn, []string, error) {
	conn, err := cc.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// plan_cache_mode: a prepared claim is planned for its arguments at
	// every call, never with a generic plan (see claimSQL).
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_custom_plan', true)`,
		strconv.FormatInt(idleMillis(idle), 10))
	b.Queue(sql, args...)
	ids, err := claimBatch(ctx, conn, b, 2, 0, scan)
	if err != nil || len(ids) == 0 {
		endTx(conn, "ROLLBACK")
		cc.put(conn)
		return nil, nil, err
	}
	return &claimConn{cc: cc, conn: conn}, ids, nil
}

// joinClaim runs the claim sql in the open claim's transaction under a
// savepoint, with the statement's time (the claim SQL reads
// statement_timestamp(), not the transaction's start). sql leaves out the
// rows named by one more argument, held: FOR UPDATE SKIP LOCKED skips only
// the rows other transactions locked, so it would return the open claim's
// own rows again.
func joinClaim(sql string, args []any, scan func(sqlstore.Rows) ([]string, error)) sqlstore.JoinFunc {
	return func(ctx context.Context, c sqlstore.ClaimConn, held []string) ([]string, bool, error) {
		conn := c.(*claimConn).conn
		b := &pgx.Batch{}
		b.Queue("SAVEPOINT postbus_claim")
		b.Queue(sql, append(args[:len(args):len(args)], held)...)
		b.Queue("RELEASE SAVEPOINT postbus_claim")
		ids, err := claimBatch(ctx, conn, b, 1, 1, scan)
		if err != nil {
			_, rerr := conn.Exec(ctx, "ROLLBACK TO SAVEPOINT postbus_claim")
			return nil, rerr != nil, err
		}
		return ids, false, nil
	}
}

// claimBatch sends b, whose statements are before statements, the claim,
// and after statements, and returns the IDs scan reads from the claim's
// rows.
func claimBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, before, after int, scan func(sqlstore.Rows) ([]string, error)) ([]string, error) {
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for range before {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	ids, err := scan(kitRows{rows})
	if err != nil {
		return nil, err
	}
	for range after {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	return ids, br.Close()
}

// endTx ends the connection's transaction with sql (COMMIT or ROLLBACK)
// when the connection is still usable; a broken connection is dropped by
// claimConns.put.
func endTx(conn *pgx.Conn, sql string) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, sql)
}

var endSQL = [...]string{sqlstore.EndCommit: "COMMIT", sqlstore.EndRollback: "ROLLBACK"}

// Settle sends stmts and the end of the transaction in one batch.
func (c *claimConn) Settle(ctx context.Context, stmts []sqlstore.Stmt, end sqlstore.TxEnd) (int64, error) {
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.Query, s.Args...)
	}
	if end != sqlstore.EndNone {
		b.Queue(endSQL[end])
	}
	var n int64
	err := func() error {
		br := c.conn.SendBatch(ctx, b)
		defer br.Close()
		for range b.Len() {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			n += tag.RowsAffected()
		}
		return br.Close()
	}()
	if err != nil {
		return 0, fmt.Errorf("claim transaction: %w", err)
	}
	return n, nil
}

// KeepAlive runs SELECT 1.
func (c *claimConn) KeepAlive(ctx context.Context) error {
	_, err := c.conn.Exec(ctx, "SELECT 1")
	return err
}

// Close ends the transaction if it is open and keeps the connection for
// the next claim.
func (c *claimConn) Close(end sqlstore.TxEnd) error {
	if end != sqlstore.EndNone {
		endTx(c.conn, endSQL[end])
	}
	c.cc.put(c.conn)
	return nil
}

// Lapsed reports the server's idle_in_transaction_session_timeout, or a
// connection closed after the transaction idled its limit.
func (c *claimConn) Lapsed(err error, idled, idle time.Duration) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25P03" {
		return true
	}
	return c.conn.IsClosed() && idled >= idle
}

package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// A claim is a transaction that stays open (sqlstore.LockedClaims): its
// SELECT … FOR UPDATE SKIP LOCKED locks the rows it returns and writes
// nothing, and the rows stay locked until the claim's rows are all
// settled. The server ends a frozen process's claim once it has been idle
// for the look-ahead window plus the lease (rounded up to whole seconds):
// MariaDB's idle_transaction_timeout, or on MySQL, which lacks it, the
// session's wait_timeout. The process itself ends a claim at the end of
// its lease: it commits what was settled, and the rows left are claimable
// again.
//
// The session's variables are set for the claim in one statement that
// also turns autocommit off, so the SELECT starts the transaction, and put
// back in one statement that turns autocommit on again, which commits it:
// a claim costs the SET, the SELECT, the settling statements and the SET
// that ends it.

// lockedClaims are the open claims of a Persistence (claims.go).
type lockedClaims = sqlstore.LockedClaims

// settler is DeleteOutgoing, ReleaseOutgoing and RecordOutgoingFailures.
type settler = sqlstore.Settler

// idleMode says how the server bounds an idle claim transaction.
type idleMode int32

const (
	idleUnknown     idleMode = iota
	idleTransaction          // MariaDB: idle_transaction_timeout
	idleWait                 // MySQL 8: wait_timeout
)

// claimSlotWait is how long a claim waits for one of the store's claim
// slots before it returns no rows: the dispatcher then backs off and tries
// again, handing over and settling the rows it holds meanwhile, which ends
// their claims and frees slots.
const claimSlotWait = 50 * time.Millisecond

// maxClaimSlotsUnbounded bounds the open claims of a store whose pool has
// no MaxOpenConns.
const maxClaimSlotsUnbounded = 64

// settleChunk bounds the IDs of one settling statement.
const settleChunk = 1000

// newClaims returns the claim registry of p and its settling methods. The
// open claim transactions take at most half the pool's MaxOpenConns (read
// on the first claim), at least one, so claims can never take every
// connection.
func newClaims(p *Persistence) (*lockedClaims, *settler) {
	reg := sqlstore.NewLockedClaims(p.dialect, sqlstore.LockedSQL{
		Delete: func(ids []string) []sqlstore.Stmt {
			var out []sqlstore.Stmt
			for len(ids) > 0 {
				chunk := ids[:min(len(ids), settleChunk)]
				ids = ids[len(chunk):]
				out = append(out, sqlstore.Stmt{Query: fmt.Sprintf(p.q.deleteHead, idList(chunk))})
			}
			return out
		},
		Fail: func(fs []bus.OutgoingFailure) []sqlstore.Stmt {
			out := make([]sqlstore.Stmt, len(fs))
			for i, f := range fs {
				after := durMicros(f.RetryAfter)
				out[i] = sqlstore.Stmt{Query: p.q.failure, Args: []any{cleanText(f.Error, maxLastError), after, after, micros(f.RetryAt), []byte(f.ID)}}
			}
			return out
		},
	}, sqlstore.LockedConfig{
		Slots: func() int {
			if m := p.db.Stats().MaxOpenConnections; m > 0 {
				return max(1, m/2)
			}
			return maxClaimSlotsUnbounded
		},
		SlotWait: claimSlotWait,
		Log:      p.log,
	})
	return reg, reg.Settler(sqlstore.SettleOps{Delete: "delete", Release: "release", Fail: "record failures"})
}

// idleMode finds out, once, which variable bounds an idle transaction on
// the server.
func (p *Persistence) idleMode(ctx context.Context, conn interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (idleMode, error) {
	if mode := idleMode(p.serverIdle.Load()); mode != idleUnknown {
		return mode, nil
	}
	var v sql.NullInt64
	err := conn.QueryRowContext(ctx, "SELECT @@SESSION.idle_transaction_timeout").Scan(&v)
	var me *mysqldriver.MySQLError
	mode := idleTransaction
	switch {
	case err == nil:
	case errors.As(err, &me) && me.Number == 1193: // ER_UNKNOWN_SYSTEM_VARIABLE
		mode = idleWait
	default:
		return idleUnknown, err
	}
	p.serverIdle.Store(int32(mode))
	return mode, nil
}

// claimSessionSQL is the SET that prepares a session for a claim whose
// transaction the server may end after idle seconds: it keeps the
// session's values in user variables, bounds the idle transaction, sets
// READ COMMITTED (no gap locks: claims never block inserts) and turns
// autocommit off.
func claimSessionSQL(mode idleMode, idle int) string {
	if mode == idleWait {
		return fmt.Sprintf("SET @postbus_idle = @@SESSION.wait_timeout, @postbus_iso = @@SESSION.transaction_isolation,"+
			" SESSION wait_timeout = %d, SESSION transaction_isolation = 'READ-COMMITTED', autocommit = 0", idle)
	}
	return fmt.Sprintf("SET @postbus_idle = @@SESSION.idle_transaction_timeout, @postbus_iso = @@SESSION.tx_isolation,"+
		" SESSION idle_transaction_timeout = %d, SESSION tx_isolation = 'READ-COMMITTED', autocommit = 0", idle)
}

// endSessionSQL commits the claim's transaction (turning autocommit on
// does) and puts back the session's values.
func endSessionSQL(mode idleMode) string {
	if mode == idleWait {
		return "SET autocommit = 1, SESSION wait_timeout = @postbus_idle, SESSION transaction_isolation = @postbus_iso"
	}
	return "SET autocommit = 1, SESSION idle_transaction_timeout = @postbus_idle, SESSION tx_isolation = @postbus_iso"
}

// idleSeconds is the idle bound of a claim transaction: the window plus
// the lease, rounded up to whole seconds (the servers' granularity).
func idleSeconds(ahead, lease time.Duration) int {
	d := max(ahead, 0) + max(lease, 0)
	return max(1, int((d+time.Second-1)/time.Second))
}

// discard closes conn without returning it to the pool: the server rolls
// back its transaction, if any, and no session state of the claim leaks
// to the pool's other users.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// claimConn is a claim's transaction on a connection of the pool
// (sqlstore.ClaimConn).
type claimConn struct {
	conn  *sql.Conn
	mode  idleMode
	ended bool // the transaction committed and the session is back
}

// Settle runs stmts, then, to end the transaction, the SET that turns
// autocommit on (a rollback with nothing written commits nothing).
func (c *claimConn) Settle(ctx context.Context, stmts []sqlstore.Stmt, end sqlstore.TxEnd) (int64, error) {
	var n int64
	for _, s := range stmts {
		k, err := sqlstore.ExecCount(ctx, c.conn, s.Query, s.Args...)
		if err != nil {
			return 0, err
		}
		n += int64(k)
	}
	if end != sqlstore.EndNone {
		if err := c.end(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// end commits the transaction and puts back the session's values.
func (c *claimConn) end(ctx context.Context) error {
	if _, err := c.conn.ExecContext(ctx, endSessionSQL(c.mode)); err != nil {
		return fmt.Errorf("commit the claim: %w", err)
	}
	c.ended = true
	return nil
}

// KeepAlive runs SELECT 1.
func (c *claimConn) KeepAlive(ctx context.Context) error {
	_, err := c.conn.ExecContext(ctx, "SELECT 1")
	return err
}

// Close gives the connection back to the pool once the transaction has
// committed (EndCommit commits it first); otherwise it discards the
// connection, which rolls the transaction back.
func (c *claimConn) Close(end sqlstore.TxEnd) error {
	if !c.ended && end == sqlstore.EndCommit {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.end(ctx); err != nil {
			discard(c.conn)
			return err
		}
	}
	if !c.ended {
		discard(c.conn)
		return nil
	}
	return c.conn.Close()
}

// Lapsed reports false: the process ends its claims at their lease.
func (c *claimConn) Lapsed(error, time.Duration, time.Duration) bool { return false }

// Close rolls back every open claim: their rows are claimable again at
// once. Call it after the buses using p have stopped (a stopping
// dispatcher settles every row it holds, which ends its claims), before
// closing the *sql.DB; p can still be used afterwards.
func (p *Persistence) Close() error {
	p.claims.RollbackAll()
	return nil
}

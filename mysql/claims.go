package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// A claim is a transaction that stays open: its SELECT … FOR UPDATE SKIP
// LOCKED locks the rows it returns and writes nothing, and the rows stay
// locked, so skipped by every other claim, until the claim's rows are all
// settled: the deletes and failure counts run in the claim's transaction,
// which commits when the last row is settled. A process that dies loses
// its connection, and the server rolls the transaction back at once: the
// rows are claimable again. A process that stops answering (frozen, cut
// off) leaves the transaction idle, and the server ends it once it has
// been idle for the look-ahead window plus the lease (rounded up to whole
// seconds): MariaDB's idle_transaction_timeout, or on MySQL, which lacks
// it, the session's wait_timeout. The process itself ends a claim at the
// end of its lease: it commits what was settled, and the rows left are
// claimable again.
//
// The session's variables are set for the claim in one statement that
// also turns autocommit off, so the SELECT starts the transaction, and put
// back in one statement that turns autocommit on again, which commits it:
// a claim costs the SET, the SELECT, the settling statements and the SET
// that ends it.

// idleMode says how the server bounds an idle claim transaction.
type idleMode int

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

// openClaim is a claim whose transaction is open, with the rows it has not
// settled yet.
type openClaim struct {
	token string
	conn  *sql.Conn
	mode  idleMode

	mu      sync.Mutex
	pending map[string]struct{} // IDs not settled yet
	done    bool                // committed, rolled back or lost
	timer   *time.Timer         // ends the claim at the end of its lease
}

// claimRegistry is the open claims of one Persistence, by token, and the
// slots that bound how many are open at once.
type claimRegistry struct {
	mu    sync.Mutex
	open  map[string]*openClaim
	slots chan struct{} // made on first use, sized from the pool
	mode  idleMode
	ids   map[string]struct{} // the IDs the open claims have not settled
}

// heldCount is how many rows the open claims have not settled.
func (p *Persistence) heldCount() int {
	p.claims.mu.Lock()
	defer p.claims.mu.Unlock()
	return len(p.claims.ids)
}

// heldByUs reports whether an open claim of p holds the row id.
func (p *Persistence) heldByUs(id string) bool {
	p.claims.mu.Lock()
	defer p.claims.mu.Unlock()
	_, ok := p.claims.ids[id]
	return ok
}

// forget drops ids from the IDs held.
func (p *Persistence) forget(ids []string) {
	p.claims.mu.Lock()
	defer p.claims.mu.Unlock()
	for _, id := range ids {
		delete(p.claims.ids, id)
	}
}

// acquireSlot takes one of the slots that bound the open claim
// transactions: half the pool's MaxOpenConns, at least one, so claims can
// never take every connection. It waits up to claimSlotWait and reports
// false if no slot came free.
func (p *Persistence) acquireSlot(ctx context.Context) (bool, error) {
	r := &p.claims
	r.mu.Lock()
	if r.slots == nil {
		n := maxClaimSlotsUnbounded
		if m := p.db.Stats().MaxOpenConnections; m > 0 {
			n = max(1, m/2)
		}
		r.slots = make(chan struct{}, n)
	}
	slots := r.slots
	r.mu.Unlock()
	select {
	case slots <- struct{}{}:
		return true, nil
	default:
	}
	t := time.NewTimer(claimSlotWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (p *Persistence) releaseSlot() { <-p.claims.slots }

// idleMode finds out, once, which variable bounds an idle transaction on
// the server.
func (p *Persistence) idleMode(ctx context.Context, conn interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (idleMode, error) {
	p.claims.mu.Lock()
	mode := p.claims.mode
	p.claims.mu.Unlock()
	if mode != idleUnknown {
		return mode, nil
	}
	var v sql.NullInt64
	err := conn.QueryRowContext(ctx, "SELECT @@SESSION.idle_transaction_timeout").Scan(&v)
	var me *mysqldriver.MySQLError
	switch {
	case err == nil:
		mode = idleTransaction
	case errors.As(err, &me) && me.Number == 1193: // ER_UNKNOWN_SYSTEM_VARIABLE
		mode = idleWait
	default:
		return idleUnknown, err
	}
	p.claims.mu.Lock()
	p.claims.mode = mode
	p.claims.mu.Unlock()
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

// register records an open claim and arms its end at the lease's end.
func (p *Persistence) register(c *openClaim, until time.Duration) {
	p.claims.mu.Lock()
	if p.claims.open == nil {
		p.claims.open = map[string]*openClaim{}
	}
	p.claims.open[c.token] = c
	if p.claims.ids == nil {
		p.claims.ids = map[string]struct{}{}
	}
	for id := range c.pending {
		p.claims.ids[id] = struct{}{}
	}
	p.claims.mu.Unlock()
	c.mu.Lock()
	c.timer = time.AfterFunc(until, func() { p.expire(c) })
	c.mu.Unlock()
}

// lookup returns the open claim of token, or nil.
func (p *Persistence) lookup(token string) *openClaim {
	p.claims.mu.Lock()
	defer p.claims.mu.Unlock()
	return p.claims.open[token]
}

// expire ends a claim at the end of its lease: what was settled is
// committed, the rows left are claimable again. A settle of the claim
// after this finds no row.
func (p *Persistence) expire(c *openClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.finish(ctx, c, true); err != nil {
		p.log.Warn("mysql: a claim whose lease ended could not commit what was settled; those rows are claimable again",
			"token", c.token, "error", err)
	}
}

// finish ends c (its mutex held): it commits and gives the connection back
// to the pool when commit is set and that works, else it discards the
// connection, which rolls the transaction back. It drops c from the
// registry and frees its slot.
func (p *Persistence) finish(ctx context.Context, c *openClaim, commit bool) error {
	if c.done {
		return nil
	}
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
	p.claims.mu.Lock()
	delete(p.claims.open, c.token)
	for id := range c.pending {
		delete(p.claims.ids, id)
	}
	p.claims.mu.Unlock()
	defer p.releaseSlot()
	if !commit {
		discard(c.conn)
		return nil
	}
	if _, err := c.conn.ExecContext(ctx, endSessionSQL(c.mode)); err != nil {
		discard(c.conn)
		return fmt.Errorf("commit the claim: %w", err)
	}
	return c.conn.Close()
}

// Close rolls back every open claim: their rows are claimable again at
// once. Call it after the buses using p have stopped (a stopping
// dispatcher settles every row it holds, which ends its claims), before
// closing the *sql.DB; p can still be used afterwards.
func (p *Persistence) Close() error {
	p.claims.mu.Lock()
	open := make([]*openClaim, 0, len(p.claims.open))
	for _, c := range p.claims.open {
		open = append(open, c)
	}
	p.claims.mu.Unlock()
	for _, c := range open {
		c.mu.Lock()
		_ = p.finish(context.Background(), c, false)
		c.mu.Unlock()
	}
	return nil
}

// held returns the IDs of ids (without repeats) that c has not settled.
func (c *openClaim) held(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := c.pending[id]; ok {
			out = append(out, id)
			delete(c.pending, id) // also drops repeats
		}
	}
	return out
}

// settle runs apply for the rows of ids that the claim of token holds, in
// its transaction, and commits when that settled its last row. An unknown
// or finished token holds nothing: 0 rows. A failed statement or commit
// ends the claim (its rows are claimable again) and is returned.
func (p *Persistence) settle(ctx context.Context, token string, ids []string, apply func(c *openClaim, ids []string) (int, error)) (int, error) {
	c := p.lookup(token)
	if c == nil {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return 0, nil
	}
	mine := c.held(ids)
	p.forget(mine)
	if len(mine) == 0 {
		return 0, nil
	}
	n, err := apply(c, mine)
	if err != nil {
		_ = p.finish(ctx, c, false)
		return 0, err
	}
	if len(c.pending) == 0 {
		if err := p.finish(ctx, c, true); err != nil {
			return 0, err
		}
	}
	return n, nil
}

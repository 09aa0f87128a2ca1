package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Claims hold their rows locked, not leased.
//
// A claim takes a connection of its own (see claimConns), begins a transaction and locks
// the rows it returns with SELECT ... FOR UPDATE SKIP LOCKED, without
// writing them. The transaction stays open while the caller sends; the
// settlements run in it (a DELETE for the rows sent, an UPDATE for the
// failures, nothing for the rows released) and the last one commits it
// in the same round trip. A row is thus inserted, locked and deleted: no
// new row version and no index entry for the claim.
//
// Other claimers skip the locked rows. When the claiming process dies,
// its connection closes and the server rolls the transaction back at
// once: its rows are claimable again at the next poll. A process that
// stops without its connection closing (frozen, or cut off by the
// network) leaves the transaction idle; the server ends it after the
// window and the lease (idle_in_transaction_session_timeout, set for the
// claim's transaction only), and the process, when it wakes, cannot
// commit.
//
// A process that runs keeps its open claims alive: a claim whose
// transaction has been idle for a third of that limit gets a "SELECT 1",
// so the rows it handed over and has not yet deleted stay locked while
// its settlements are late (a loaded machine), rather than going to
// another dispatcher, which would send them again. A claim still open
// twice its window and lease after it began is rolled back, so a caller
// that never settles it cannot hold its rows and connection for ever.

// claimRegistry holds the open claims of a Persistence by token, and the
// slots that bound how many connections they hold at once.
type claimRegistry struct {
	log   *slog.Logger
	mu    sync.Mutex
	open  map[string]*openClaim
	slots chan struct{}
	conns claimConns
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

// openClaim is one claim's transaction and the rows it has not settled.
type openClaim struct {
	reg    *claimRegistry
	tokens []string      // the claims in this transaction (see join)
	idle   time.Duration // the server's idle limit for the transaction

	mu      sync.Mutex // serialises the settlements and the expiry
	conn    *pgx.Conn
	pending map[string]struct{}
	wrote   bool      // a settlement wrote a row: end with COMMIT
	used    time.Time // when the transaction last ran a statement
	born    time.Time // when the claim began
	timer   *time.Timer
	done    bool
}

// claimSlots is how many claim transactions a Persistence keeps open at
// once, each on a connection of its own beside the pool: half the pool's
// size, at least two.
func claimSlots(pool *pgxpool.Pool) int {
	return max(2, int(pool.Config().MaxConns)/2)
}

func newClaimRegistry(slots int, cfg *pgx.ConnConfig, log *slog.Logger) *claimRegistry {
	return &claimRegistry{log: log, open: map[string]*openClaim{}, slots: make(chan struct{}, slots), conns: claimConns{cfg: cfg}}
}

// slotWait is how long a claim waits for a slot before it returns no row:
// the settlements that free a slot may be queued behind the caller's own
// wait for this claim (a dispatcher that gathers its claim before it
// settles the rows it holds), so a claim must not wait for them for long.
const slotWait = 100 * time.Millisecond

// takeSlot takes a claim slot, waiting up to slotWait. It reports false,
// with ctx's error if ctx ended, when it took none.
func (r *claimRegistry) takeSlot(ctx context.Context) (bool, error) {
	select {
	case r.slots <- struct{}{}:
		return true, nil
	default:
	}
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case r.slots <- struct{}{}:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// idleMillis is the idle limit of a claim's transaction in whole
// milliseconds, rounded up, within the setting's range.
func idleMillis(d time.Duration) int64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return min(max(int64(ms), 1), math.MaxInt32)
}

// begin takes a slot and a connection and runs, in one round trip, BEGIN,
// the transaction's settings and the claim statement. It returns the open
// claim, registered under token, and the rows; with no row (none due, or
// no slot free within slotWait) it has ended the transaction and returns a
// nil claim.
func (r *claimRegistry) begin(ctx context.Context, idle time.Duration, token, sql, joinSQL string, args []any, scan func(pgx.Rows) (string, error)) (*openClaim, error) {
	select {
	case r.slots <- struct{}{}:
	default:
		if c, ok, err := r.join(ctx, idle, token, joinSQL, args, scan); ok {
			return c, err
		}
		if ok, err := r.takeSlot(ctx); !ok {
			return nil, err // no slot: no row, or ctx's error
		}
	}
	conn, err := r.conns.get(ctx)
	if err != nil {
		<-r.slots
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// plan_cache_mode: a prepared claim is planned for its arguments at
	// every call, never with a generic plan (see claimSQL).
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_custom_plan', true)`,
		strconv.FormatInt(idleMillis(idle), 10))
	b.Queue(sql, args...)
	ids, err := claimBatch(ctx, conn, b, 2, 0, scan)
	pending := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		pending[id] = struct{}{}
	}
	if err != nil || len(pending) == 0 {
		endTx(conn, "ROLLBACK")
		r.conns.put(conn)
		<-r.slots
		return nil, err
	}
	c := &openClaim{reg: r, tokens: []string{token}, idle: idle, conn: conn, pending: pending, used: time.Now()}
	c.born = c.used
	c.mu.Lock() // the timer may fire at once: it finds the claim registered
	defer c.mu.Unlock()
	r.mu.Lock()
	r.open[token] = c
	r.mu.Unlock()
	c.timer = time.AfterFunc(c.idle/3, c.tick)
	return c, nil
}

// joinAge is how long after it began an open claim takes in further
// claims when every slot is taken (see join): a claim commits only once
// all its rows are settled, so the longer it takes in new ones, the more
// rows delivered and not yet committed as deleted a crash would send
// again.
const joinAge = time.Second

// join runs a claim in the youngest open claim's transaction, when every
// slot is taken and that claim began less than joinAge ago (and a third
// of its idle limit): a dispatcher's claims follow each other faster than
// their rows are settled, and a small pool must not make a claim wait for
// a slot while rows it holds fall due. The claim runs under a savepoint,
// with the statement's time (the claim SQL reads statement_timestamp(),
// not the transaction's start), and its rows join the open claim's: the
// transaction commits once every row of both is settled. sql is the claim
// that leaves out the rows named by one more argument: FOR UPDATE SKIP
// LOCKED skips only the rows other transactions locked, so it would return
// the open claim's own rows again. It reports false when no open claim
// could take it in.
func (r *claimRegistry) join(ctx context.Context, idle time.Duration, token, sql string, args []any, scan func(pgx.Rows) (string, error)) (*openClaim, bool, error) {
	var c *openClaim
	r.mu.Lock()
	for _, o := range r.open {
		if o.idle == idle && (c == nil || o.born.After(c.born)) {
			c = o
		}
	}
	r.mu.Unlock()
	if c == nil {
		return nil, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || time.Since(c.born) >= min(joinAge, c.idle/3) {
		return nil, false, nil
	}
	// Not cancelled with the caller: a statement cancelled half-way would
	// abort the transaction, and the rows of the claims already in it.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.idle/3)
	defer cancel()
	b := &pgx.Batch{}
	held := make([]string, 0, len(c.pending))
	for id := range c.pending {
		held = append(held, id)
	}
	b.Queue("SAVEPOINT postbus_claim")
	b.Queue(sql, append(args[:len(args):len(args)], held)...)
	b.Queue("RELEASE SAVEPOINT postbus_claim")
	ids, err := claimBatch(qctx, c.conn, b, 1, 1, scan)
	if err != nil {
		if _, rerr := c.conn.Exec(qctx, "ROLLBACK TO SAVEPOINT postbus_claim"); rerr != nil {
			c.finish("ROLLBACK")
		}
		return nil, true, err
	}
	c.used = time.Now()
	if len(ids) == 0 {
		return nil, true, nil
	}
	for _, id := range ids {
		c.pending[id] = struct{}{}
	}
	c.tokens = append(c.tokens, token)
	r.mu.Lock()
	r.open[token] = c
	r.mu.Unlock()
	return c, true, nil
}

// claimBatch sends b, whose statements are before statements, the claim,
// and after statements, and returns the IDs scan reads from the claim's
// rows.
func claimBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, before, after int, scan func(pgx.Rows) (string, error)) ([]string, error) {
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
	var ids []string
	for rows.Next() {
		id, err := scan(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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

// get returns the open claim of token, or nil.
func (r *claimRegistry) get(token string) *openClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open[token]
}

// rollbackAll rolls back every open claim.
func (r *claimRegistry) rollbackAll() {
	r.mu.Lock()
	open := make([]*openClaim, 0, len(r.open))
	for _, c := range r.open {
		open = append(open, c)
	}
	r.mu.Unlock()
	for _, c := range open {
		c.mu.Lock()
		c.finish("ROLLBACK")
		c.mu.Unlock()
	}
}

// tick keeps a claim's transaction alive once it has idled for a third of
// its limit, and rolls the claim back once it is older than twice its
// limit or its connection failed.
func (c *openClaim) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	age := time.Since(c.born)
	if age >= 2*c.idle {
		c.reg.log.Warn("postgres: a claim was not settled within twice its lease; its rows are claimable again",
			"unsettled", len(c.pending), "age", age.Round(time.Millisecond))
		c.finish("ROLLBACK")
		return
	}
	if wait := c.idle/3 - time.Since(c.used); wait > 0 { // a settlement ran since the timer was set
		c.timer.Reset(min(wait, 2*c.idle-age))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.idle/3)
	_, err := c.conn.Exec(ctx, "SELECT 1")
	cancel()
	if err != nil {
		c.reg.log.Warn("postgres: a claim's transaction ended; its rows are claimable again",
			"unsettled", len(c.pending), "idle", time.Since(c.used).Round(time.Millisecond), "error", err)
		c.finish("ROLLBACK")
		return
	}
	c.used = time.Now()
	c.timer.Reset(min(c.idle/3, 2*c.idle-age))
}

// finish ends the transaction with sql unless it has ended, returns the
// connection and the slot, and forgets the claim. The caller holds c.mu.
func (c *openClaim) finish(sql string) {
	if c.done {
		return
	}
	c.done = true
	c.timer.Stop()
	if sql != "" {
		endTx(c.conn, sql)
	}
	c.reg.conns.put(c.conn)
	c.reg.mu.Lock()
	for _, t := range c.tokens {
		delete(c.reg.open, t)
	}
	c.reg.mu.Unlock()
	<-c.reg.slots
}

// settleKind says what a settlement does to its rows.
type settleKind int

const (
	settleDelete settleKind = iota
	settleRelease
	settleFail
)

// settle runs one settlement of rows (the IDs of at, the claim's rows not
// yet settled) in the claim's transaction: sql with args made from the
// rows kept (nil for a release), then COMMIT, or ROLLBACK when nothing was
// written, in the same round trip when these were the last rows. It
// returns how many rows it settled. A claim whose transaction the server
// has ended for idling (its lease lapsed) settles nothing and is no error.
func (c *openClaim) settle(ctx context.Context, kind settleKind, ids []string, sql string, args func(keep []int) []any) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return 0, nil
	}
	keep := make([]int, 0, len(ids))
	seen := make(map[string]struct{}, len(ids))
	for i, id := range ids {
		if _, ok := c.pending[id]; !ok {
			continue
		}
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		keep = append(keep, i)
	}
	if len(keep) == 0 {
		return 0, nil
	}
	last := len(keep) == len(c.pending)
	write := kind != settleRelease
	end := ""
	if last {
		end = "ROLLBACK"
		if c.wrote || write {
			end = "COMMIT"
		}
	}
	if !write && !last {
		for id := range seen {
			delete(c.pending, id)
		}
		return len(keep), nil
	}
	b := &pgx.Batch{}
	if write {
		b.Queue(sql, args(keep)...)
	}
	if end != "" {
		b.Queue(end)
	}
	n := len(keep)
	err := func() error {
		br := c.conn.SendBatch(ctx, b)
		defer br.Close()
		if write {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			n = int(tag.RowsAffected())
		}
		if end != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return br.Close()
	}()
	if err != nil {
		lapsed := c.lapsed(err)
		c.finish("ROLLBACK")
		if lapsed {
			c.reg.log.Warn("postgres: the server ended a claim idle past its lease; its rows are claimable again",
				"unsettled", len(c.pending), "idle", time.Since(c.used).Round(time.Millisecond))
			return 0, nil
		}
		return 0, fmt.Errorf("claim transaction: %w", err)
	}
	c.used = time.Now()
	if write {
		c.wrote = true
	}
	for id := range seen {
		delete(c.pending, id)
	}
	if last {
		c.finish("")
	}
	return n, nil
}

// lapsed reports whether err says the server ended the claim's
// transaction for idling past its limit: the claim's lease lapsed, and
// another claim may hold its rows by now.
func (c *openClaim) lapsed(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25P03" { // idle_in_transaction_session_timeout
		return true
	}
	return c.conn.IsClosed() && time.Since(c.used) >= c.idle
}

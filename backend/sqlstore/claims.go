package sqlstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/postbus/bus/backend"
)

// Claims that lock their rows (PostgreSQL, MySQL/MariaDB).
//
// A claim is a transaction on a connection of its own: its SELECT … FOR
// UPDATE SKIP LOCKED locks the rows it returns and writes nothing, and the
// transaction stays open while the dispatcher hands the rows over. The
// settlements run in it (a DELETE for the rows sent, an UPDATE for the
// failures, nothing for the rows released) and the one that settles the
// claim's last row ends it: COMMIT, in the same round trip where the
// client can. Other claimers skip the locked rows. A process that dies
// loses its connection, and the server rolls the transaction back at once;
// a process that freezes leaves it idle, and the server ends it after the
// idle limit the claim set (the look-ahead window and the lease, and a
// grace on PostgreSQL).
//
// A running process bounds its own claims in one of two ways
// (LockedClaims.KeepAlive). With a keep-alive, a claim whose transaction
// has idled a third of its limit gets a "SELECT 1", so the rows it handed
// over and has not yet deleted stay locked while its settlements are late,
// and a claim still open twice its limit after it began is rolled back.
// Without, a claim ends at its limit: what was settled commits, the rest is
// claimable again.

// ClaimConn is the connection a locked claim holds its transaction on,
// which a dialect opens (a pgx.Conn beside the pool, a *sql.Conn of the
// pool). LockedClaims serialises the calls on one connection.
type ClaimConn interface {
	// Settle runs stmts in the transaction and returns the rows they
	// affected; when end is not EndNone it then ends the transaction, in
	// the same round trip where the client can.
	Settle(ctx context.Context, stmts []Stmt, end TxEnd) (int64, error)
	// KeepAlive runs a statement that does nothing, so the server does not
	// end the transaction for idling.
	KeepAlive(ctx context.Context) error
	// Close ends the transaction, if it is still open, as end says
	// (EndRollback may simply drop the connection; EndNone: Settle ended
	// it), and gives the connection back; a broken connection is dropped.
	Close(end TxEnd) error
	// Lapsed reports whether err, from Settle, says the server ended the
	// transaction for idling past its limit, idle: the claim's lease lapsed
	// and another claim may hold its rows by now. idled is how long the
	// transaction had run no statement.
	Lapsed(err error, idled, idle time.Duration) bool
}

// TxEnd says how a claim's transaction ends.
type TxEnd int

// The ends of a claim's transaction.
const (
	EndNone     TxEnd = iota // left open
	EndCommit                // COMMIT
	EndRollback              // ROLLBACK; nothing was written
)

// Stmt is one statement and its arguments.
type Stmt struct {
	Query string
	Args  []any
}

// OpenFunc begins a claim's transaction on a connection and locks the rows
// it claims, whose IDs it returns. With no row, or an error, it has ended
// the transaction and given the connection back, and returns a nil
// connection.
type OpenFunc func(ctx context.Context) (ClaimConn, []string, error)

// JoinFunc runs a claim in conn's open transaction (under a savepoint),
// leaving out held, the rows the transaction already holds, and returns
// the IDs it locked. lost reports a transaction left unusable by a failed
// join: the open claim then rolls back.
type JoinFunc func(ctx context.Context, conn ClaimConn, held []string) (ids []string, lost bool, err error)

// LockedClaims are the open claims of one store, by token, and the slots
// that bound how many are open at once. Make one with NewLockedClaims.
type LockedClaims struct {
	d   *Dialect
	sql LockedSQL
	cfg LockedConfig

	mu    sync.Mutex
	open  map[string]*OpenClaim
	ids   map[string]struct{} // the rows the open claims have not settled
	slots chan struct{}       // made on first use, of cfg.Slots()
}

// LockedConfig is how a store's locked claims behave.
type LockedConfig struct {
	// Slots is how many claims may be open at once, read on the first
	// claim.
	Slots func() int
	// SlotWait is how long a claim waits for a slot before it returns no
	// row: the settlements that free one may be queued behind the caller's
	// own wait for this claim.
	SlotWait time.Duration
	// KeepAlive keeps open claims alive and rolls back those open twice
	// their idle limit; otherwise a claim ends at its idle limit,
	// committing what was settled.
	KeepAlive bool
	// Log receives the warnings about claims that ended early.
	Log *slog.Logger
}

// LockedSQL builds the settling statements run in a claim's transaction.
type LockedSQL struct {
	// Delete deletes the rows ids, which the claim holds.
	Delete func(ids []string) []Stmt
	// Fail records the failures fs (of rows the claim holds), making each
	// row claimable again at the server's statement time + RetryAfter when
	// positive, else at RetryAt.
	Fail func(fs []backend.OutgoingFailure) []Stmt
}

// NewLockedClaims returns the claim registry of a store.
func NewLockedClaims(d *Dialect, sql LockedSQL, cfg LockedConfig) *LockedClaims {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &LockedClaims{d: d, sql: sql, cfg: cfg, open: map[string]*OpenClaim{}, ids: map[string]struct{}{}}
}

// OpenClaim is one claim's transaction and the rows it has not settled.
type OpenClaim struct {
	reg    *LockedClaims
	tokens []string      // the claims in this transaction (see join)
	idle   time.Duration // the idle limit of the transaction

	mu      sync.Mutex // serialises the settlements and the timer
	conn    ClaimConn
	pending map[string]struct{}
	wrote   bool      // a statement wrote a row: end with COMMIT
	used    time.Time // when the transaction last ran a statement
	born    time.Time // when the claim began
	timer   *time.Timer
	done    bool
}

// Held reports whether an open claim holds the row id.
func (r *LockedClaims) Held(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.ids[id]
	return ok
}

// HeldCount is how many rows the open claims have not settled.
func (r *LockedClaims) HeldCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// Get returns the open claim of token, or nil.
func (r *LockedClaims) Get(token string) *OpenClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open[token]
}

// slotChan returns the slots, made on first use.
func (r *LockedClaims) slotChan() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots == nil {
		r.slots = make(chan struct{}, max(1, r.cfg.Slots()))
	}
	return r.slots
}

// takeSlot takes a claim slot, waiting up to SlotWait. It reports false,
// with ctx's error if ctx ended, when it took none.
func (r *LockedClaims) takeSlot(ctx context.Context, slots chan struct{}) (bool, error) {
	t := time.NewTimer(r.cfg.SlotWait)
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

// Claim runs a claim registered under token, whose transaction the server
// ends after idle without a statement. It takes a slot; when every slot is
// taken it first tries join, when not nil, in the youngest open claim of
// the same idle limit, then waits up to SlotWait for a slot, and returns no
// error and no claim when none came free. open runs the claim, and the
// rows it locked are held until they are settled.
func (r *LockedClaims) Claim(ctx context.Context, token string, idle time.Duration, open OpenFunc, join JoinFunc) error {
	slots := r.slotChan()
	select {
	case slots <- struct{}{}:
	default:
		if join != nil {
			if ok, err := r.join(ctx, token, idle, join); ok {
				return err
			}
		}
		if ok, err := r.takeSlot(ctx, slots); !ok {
			return err // no slot: no row, or ctx's error
		}
	}
	start := time.Now()
	conn, ids, err := open(ctx)
	if err != nil || conn == nil {
		<-slots
		return err
	}
	c := &OpenClaim{reg: r, tokens: []string{token}, idle: idle, conn: conn, used: time.Now(),
		pending: make(map[string]struct{}, len(ids))}
	c.born = c.used
	for _, id := range ids {
		c.pending[id] = struct{}{}
	}
	c.mu.Lock() // the timer may fire at once: it finds the claim registered
	defer c.mu.Unlock()
	r.mu.Lock()
	r.open[token] = c
	for _, id := range ids {
		r.ids[id] = struct{}{}
	}
	r.mu.Unlock()
	if r.cfg.KeepAlive {
		c.timer = time.AfterFunc(c.idle/3, c.tick)
	} else {
		c.timer = time.AfterFunc(time.Until(start.Add(idle)), c.expire)
	}
	return nil
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
// a slot while rows it holds fall due. Its rows join the open claim's: the
// transaction commits once every row of both is settled. It reports false
// when no open claim could take it in.
func (r *LockedClaims) join(ctx context.Context, token string, idle time.Duration, join JoinFunc) (bool, error) {
	var c *OpenClaim
	r.mu.Lock()
	for _, o := range r.open {
		if o.idle == idle && (c == nil || o.born.After(c.born)) {
			c = o
		}
	}
	r.mu.Unlock()
	if c == nil {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || time.Since(c.born) >= min(joinAge, c.idle/3) {
		return false, nil
	}
	// Not cancelled with the caller: a statement cancelled half-way would
	// abort the transaction, and the rows of the claims already in it.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.idle/3)
	defer cancel()
	held := make([]string, 0, len(c.pending))
	for id := range c.pending {
		held = append(held, id)
	}
	ids, lost, err := join(qctx, c.conn, held)
	if err != nil {
		if lost {
			c.finish(EndRollback)
		}
		return true, err
	}
	c.used = time.Now()
	if len(ids) == 0 {
		return true, nil
	}
	c.tokens = append(c.tokens, token)
	r.mu.Lock()
	r.open[token] = c
	for _, id := range ids {
		c.pending[id] = struct{}{}
		r.ids[id] = struct{}{}
	}
	r.mu.Unlock()
	return true, nil
}

// RollbackAll rolls back every open claim: their rows are claimable again
// at once, and their settlements match no row.
func (r *LockedClaims) RollbackAll() {
	r.mu.Lock()
	open := make([]*OpenClaim, 0, len(r.open))
	for _, c := range r.open {
		open = append(open, c)
	}
	r.mu.Unlock()
	for _, c := range open {
		c.mu.Lock()
		c.finish(EndRollback)
		c.mu.Unlock()
	}
}

// tick keeps a claim's transaction alive once it has idled for a third of
// its limit, and rolls the claim back once it is older than twice its
// limit or its connection failed.
func (c *OpenClaim) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	age := time.Since(c.born)
	if age >= 2*c.idle {
		c.reg.cfg.Log.Warn(c.reg.d.Name+": a claim was not settled within twice its lease; its rows are claimable again",
			"unsettled", len(c.pending), "age", age.Round(time.Millisecond))
		c.finish(EndRollback)
		return
	}
	if wait := c.idle/3 - time.Since(c.used); wait > 0 { // a settlement ran since the timer was set
		c.timer.Reset(min(wait, 2*c.idle-age))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.idle/3)
	err := c.conn.KeepAlive(ctx)
	cancel()
	if err != nil {
		c.reg.cfg.Log.Warn(c.reg.d.Name+": a claim's transaction ended; its rows are claimable again",
			"unsettled", len(c.pending), "idle", time.Since(c.used).Round(time.Millisecond), "error", err)
		c.finish(EndRollback)
		return
	}
	c.used = time.Now()
	c.timer.Reset(min(c.idle/3, 2*c.idle-age))
}

// expire ends a claim at its idle limit: what was settled is committed,
// the rows left are claimable again.
func (c *OpenClaim) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if err := c.finish(EndCommit); err != nil {
		c.reg.cfg.Log.Warn(c.reg.d.Name+": a claim whose lease ended could not commit what was settled; those rows are claimable again",
			"token", c.tokens[0], "error", err)
	}
}

// finish ends the transaction as end says, unless it has ended, gives the
// connection back, frees the slot and forgets the claim. The caller holds
// c.mu.
func (c *OpenClaim) finish(end TxEnd) error {
	if c.done {
		return nil
	}
	c.done = true
	c.timer.Stop()
	r := c.reg
	r.mu.Lock()
	for _, t := range c.tokens {
		delete(r.open, t)
	}
	for id := range c.pending {
		delete(r.ids, id)
	}
	r.mu.Unlock()
	defer func() { <-r.slots }()
	return c.conn.Close(end)
}

// Do runs fn on the claim's connection, serialised with its settlements,
// unless the claim has ended (ended is then true). fn reports whether it
// wrote (the claim then ends with COMMIT) and whether the transaction is
// lost (the claim is then rolled back).
func (c *OpenClaim) Do(fn func(conn ClaimConn) (wrote, lost bool, err error)) (ended bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return true, nil
	}
	wrote, lost, err := fn(c.conn)
	if lost {
		c.finish(EndRollback)
		return false, err
	}
	if err == nil {
		c.used = time.Now()
		c.wrote = c.wrote || wrote
	}
	return false, err
}

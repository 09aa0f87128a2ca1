package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// heldRow names a claimed row and the lease token of its claim.
type heldRow struct{ seq, token int64 }

// delivery is one claimed message being handled. The delivery context
// carries it, so an outbox handling on the same database can delete the
// row in its own transaction (see Persistence.BeginHandling).
type delivery struct {
	t      *Transport
	row    heldRow
	owner  int64  // the owner key the row was claimed under; 0 for none
	id     string // the message ID
	env    *bus.Envelope
	ctx    context.Context // the delivery context, carrying the delivery
	cancel context.CancelCauseFunc
	// inTx counts the outbox transactions that are deleting the row; while
	// one is open its row lock keeps the message from other consumers.
	inTx atomic.Int32
	// ackedInTx is set once such a transaction committed: the row is gone
	// and the message is acknowledged.
	ackedInTx atomic.Bool
}

type deliveryKey struct{}

func deliveryFrom(ctx context.Context) *delivery {
	d, _ := ctx.Value(deliveryKey{}).(*delivery)
	return d
}

// busy reports whether the row is acknowledged or protected by an open
// handling transaction, so the heartbeat leaves it alone.
func (d *delivery) busy() bool { return d.inTx.Load() > 0 || d.ackedInTx.Load() }

// receiver is one Receive call.
type receiver struct {
	t     *Transport
	queue string
	h     bus.DeliveryHandler
	base  context.Context // Receive's ctx without its cancellation
	pool  *driver.Pool[*delivery]

	mu      sync.Mutex
	flight  map[int64]*delivery // every row held: running, waiting or settling
	settles sync.WaitGroup      // settlements in progress
	errWait time.Duration
	reaped  time.Time // when the rows of vanished owners were last freed
}

// Receive consumes queue with at most opts.Concurrency handlers at once
// until ctx ends, then waits for the handlers in flight, settles them,
// releases the rows it claimed ahead and returns nil. It holds up to twice
// Concurrency rows: the running ones and as many claimed ahead, so a
// finishing handler finds its next message without a round trip; claims
// take as many rows as fit, in one statement. An idle Receive waits for a
// notification on the queue or PollInterval. While a row is held its lease
// is extended every Lease/3; when an extension finds the row taken by
// another consumer, the delivery ctx is cancelled with ErrLeaseLost as its
// cause. A nil result deletes the row (grouped with other
// acknowledgements; a failed delete is tried again for two thirds of the
// lease); an error makes it available again at once. About once a
// second it also makes available at once the rows of its queue that a
// consumer which has since died still held (see DisableOwnerLock). It
// returns an error only when the tables are missing.
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	conc := max(1, opts.Concurrency)
	r := &receiver{t: t, queue: queue, h: h, base: context.WithoutCancel(ctx), flight: map[int64]*delivery{}}
	// A row counts against the read-ahead until its acknowledgement ends;
	// its handler's worker is free as soon as the handler returned.
	pool, err := driver.NewPool(driver.PoolOptions[*delivery]{Concurrency: conc, Prefetch: conc,
		HoldUntilSettled: true, Handle: r.handle, Unstarted: r.giveBack})
	if err != nil {
		return fmt.Errorf("postgres: receive %s: %w", queue, err)
	}
	r.pool = pool
	var wake <-chan struct{}
	if !t.opts.DisableNotify {
		ch, unsubscribe := t.listen.subscribe(queue)
		defer unsubscribe()
		wake = ch
	}
	// Left last: the lock outlives every row this Receive holds.
	defer t.owner.join(ctx, r)()
	hbCtx, stopHeartbeat := context.WithCancel(r.base)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); r.heartbeat(hbCtx) }()
	defer func() {
		pool.Close() // releases the rows claimed ahead, waits for the handlers
		r.settles.Wait()
		stopHeartbeat()
		<-hbDone
	}()

	poll := time.NewTimer(t.opts.PollInterval)
	defer poll.Stop()
	first := true
	for {
		// Claim when half the handlers' worth of rows fits, or when a
		// handler is idle with nothing to start; never zero rows in a loop
		// while the rows held wait for their acknowledgements.
		want := pool.AcquireBatch(ctx, (conc+1)/2, pool.Capacity())
		if want == 0 {
			return nil
		}
		r.reapVanished(ctx)
		n, err := r.claim(ctx, want)
		if err != nil {
			if first && isUndefinedTable(err) {
				return fmt.Errorf("postgres: receive %s: %w (Provision creates the tables)", queue, err)
			}
			if ctx.Err() == nil {
				t.log.Warn("postgres: claim failed; retrying", slog.String("queue", queue), slog.Any("error", err))
				r.pause(ctx)
			}
			continue
		}
		first, r.errWait = false, 0
		if n == want {
			continue // there may be more
		}
		if changed := pool.Changed(); pool.Queued() > 0 {
			select { // the queue is drained, but rows wait for handlers
			case <-changed:
			case <-wake:
			case <-ctx.Done():
			}
			continue
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(r.idleWait())
		select {
		case <-wake:
		case <-poll.C:
		case <-ctx.Done():
		}
	}
}

// idleWait is how long an idle Receive waits for a notification before
// it looks again: PollInterval, or less when the rows of vanished owners
// are due to be looked for first.
func (r *receiver) idleWait() time.Duration {
	wait := r.t.opts.PollInterval
	if !r.t.opts.DisableOwnerLock {
		wait = min(wait, max(0, time.Until(r.reaped.Add(ownerCheckInterval))))
	}
	return wait
}

// reapVanished makes available the leased rows of the queue whose owner
// died, at most once every ownerCheckInterval. A failure is logged and
// only delays those rows.
func (r *receiver) reapVanished(ctx context.Context) {
	t := r.t
	if t.opts.DisableOwnerLock || time.Since(r.reaped) < ownerCheckInterval || ctx.Err() != nil {
		return
	}
	r.reaped = time.Now()
	cctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	tag, err := t.pool.Exec(cctx, t.sql.reap, r.queue, t.owner.current())
	if err != nil {
		if ctx.Err() == nil && !isUndefinedTable(err) {
			t.log.Warn("postgres: freeing the rows of vanished consumers failed", slog.String("queue", r.queue), slog.Any("error", err))
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		t.log.Info("postgres: freed the rows of a consumer that died", slog.String("queue", r.queue), slog.Int64("rows", n))
	}
}

// ownerLost cancels the deliveries claimed under key, whose lock was
// lost: other consumers may take their rows at once. A delivery whose
// row an outbox handling is deleting keeps it (the row lock protects it,
// and the deletion names the lease token).
func (r *receiver) ownerLost(key int64) {
	r.mu.Lock()
	var lost []*delivery
	for _, d := range r.flight {
		if d.owner == key && !d.busy() {
			lost = append(lost, d)
		}
	}
	r.mu.Unlock()
	for _, d := range lost {
		d.cancel(ErrLeaseLost)
	}
}

// pause waits after a failed claim: 100 ms doubling to 5 s.
func (r *receiver) pause(ctx context.Context) {
	r.errWait = min(max(2*r.errWait, 100*time.Millisecond), 5*time.Second)
	select {
	case <-time.After(r.errWait):
	case <-ctx.Done():
	}
}

// giveBack hands back a row claimed ahead that no handler took.
func (r *receiver) giveBack(d *delivery) {
	r.forget(d)
	r.release(d.row)
}

// forget ends the hold of a row: the heartbeat no longer extends it.
func (r *receiver) forget(d *delivery) {
	r.mu.Lock()
	delete(r.flight, d.row.seq)
	r.mu.Unlock()
	d.cancel(nil)
}

// claim leases up to limit rows, puts them into the pool, which holds
// limit slots for them, and gives back the slots of the rows it did not
// put. The claim itself does not stop when ctx ends (rows leased but never
// handed out would wait out their lease); rows claimed after ctx ended are
// released. It returns how many rows it claimed.
func (r *receiver) claim(ctx context.Context, limit int) (int, error) {
	put := 0
	defer func() { r.pool.Release(limit - put) }()
	t := r.t
	cctx, cancel := context.WithTimeout(r.base, settleTimeout)
	defer cancel()
	key := t.owner.current()
	token := ownedToken(rand.Int64(), key)
	rows, err := t.pool.Query(cctx, t.sql.claim, r.queue, limit, micros(t.opts.Lease), token, key)
	if err != nil {
		return 0, err
	}
	type claimed struct {
		seq      int64
		id       string
		body     []byte
		envelope []byte
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.seq, &c.id, &c.body, &c.envelope); err != nil {
			rows.Close()
			return 0, err
		}
		got = append(got, c)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	slices.SortFunc(got, func(a, b claimed) int { return cmp.Compare(a.seq, b.seq) })
	ds := make([]*delivery, 0, len(got))
	for _, c := range got {
		row := heldRow{seq: c.seq, token: token}
		if ctx.Err() != nil {
			r.release(row)
			continue
		}
		env := decodeRow(c.id, c.body, c.envelope)
		dctx, cancel := context.WithCancelCause(r.base)
		d := &delivery{t: r.t, row: row, owner: key, id: env.ID, env: env, cancel: cancel}
		d.ctx = context.WithValue(dctx, deliveryKey{}, d)
		ds = append(ds, d)
	}
	r.mu.Lock()
	for _, d := range ds {
		r.flight[d.row.seq] = d
	}
	r.mu.Unlock()
	// In flight before the key is checked: a lock lost in between either
	// finds these deliveries (ownerLost) or changed the key. Rows claimed
	// under a lost key may be another consumer's already: not handed out.
	if key != 0 && t.owner.current() != key {
		for _, d := range ds {
			r.forget(d)
		}
		return len(got), nil
	}
	for _, d := range ds {
		r.pool.Put(d)
		put++
	}
	return len(got), nil
}

// ownedToken returns the lease token of a claim under key: random, with
// the low 32 bits of key as its own. The reap frees only rows whose token
// carries their owner's bits, so a row that a v0.3.0 consumer claimed
// after its owner's lease lapsed (its claim leaves lease_owner as it was)
// is not freed when that owner dies: it waits out its new lease.
func ownedToken(random, key int64) int64 {
	if key == 0 {
		return random
	}
	return random&^ownerBits | key&ownerBits
}

// ownerBits are the bits of a lease token that name its owner.
const ownerBits = 1<<32 - 1

// decodeRow rebuilds the envelope of a claimed row from its envelope
// column (bus.MarshalEnvelope of everything but the body) and its body
// column. A row whose envelope does not decode still yields an envelope:
// the row's ID, the body, and bus.HeaderDecodeError saying what was wrong.
func decodeRow(id string, body, envelope []byte) *bus.Envelope {
	env, err := bus.UnmarshalEnvelope(envelope)
	if err != nil {
		env = &bus.Envelope{ID: id, Body: body}
		env.SetHeader(bus.HeaderDecodeError, "postgres: undecodable envelope: "+err.Error())
		return env
	}
	env.Body = body
	return env
}

// handle runs the handler of one held row on a pool worker, whose slot
// is free as soon as the handler returned; the row stays held (and its
// lease extended) until it is settled, by a goroutine of its own.
func (r *receiver) handle(d *delivery) {
	err := r.h(d.ctx, d.env)
	r.settles.Go(func() {
		defer r.pool.Settled(d)
		defer r.forget(d)
		if errors.Is(context.Cause(d.ctx), ErrLeaseLost) {
			return // another consumer has the message now
		}
		if err != nil {
			r.release(d.row)
			return
		}
		if d.ackedInTx.Load() {
			return // deleted by the handling's transaction
		}
		if err := r.settle(func(ctx context.Context) error { return r.t.acks.Store(ctx, []heldRow{d.row}) }); err != nil {
			r.t.log.Warn("postgres: acknowledgement failed; the message will be delivered again after its lease",
				slog.String("queue", r.queue), slog.String("message_id", d.id), slog.Any("error", err))
		}
	})
}

// settleRetryDelay is the first wait before a failed acknowledgement is
// tried again; it doubles up to a second.
const settleRetryDelay = 50 * time.Millisecond

// settle runs the acknowledgement of a handled row, and retries it
// (each try on whatever connection the pool gives, a new one once the
// broken one is discarded) while the row is surely still this consumer's:
// the heartbeat extended its lease at most Lease/3 before the first try, so
// it holds for two thirds of a lease after. A settlement lost in a
// connection cut or a terminated backend would otherwise deliver the
// message again once the lease lapsed. The statements name the row with its
// lease token, so a try that lands after all changes nothing.
func (r *receiver) settle(fn func(context.Context) error) error {
	until := time.Now().Add(r.t.opts.Lease * 2 / 3)
	wait := settleRetryDelay
	for {
		ctx, cancel := context.WithTimeout(r.base, settleTimeout)
		err := fn(ctx)
		cancel()
		if err == nil || time.Now().Add(wait).After(until) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// release makes a row available again at once. It is not retried: a lost
// release only delays the message until its lease lapses (it was not
// handled, so it is not delivered twice), and a Receive that stops while
// the database is away must not wait out a lease for every row it held.
func (r *receiver) release(row heldRow) {
	ctx, cancel := context.WithTimeout(r.base, settleTimeout)
	defer cancel()
	if _, err := r.t.pool.Exec(ctx, r.t.sql.release, row.seq, row.token); err != nil {
		r.t.log.Warn("postgres: release failed; the message will be delivered again after its lease",
			slog.String("queue", r.queue), slog.Any("error", err))
	}
}

// ack is the acknowledgement batcher's flush: one DELETE for a group.
func (t *Transport) ack(ctx context.Context, rows []heldRow) error {
	seqs, tokens := splitHeld(rows)
	_, err := t.pool.Exec(ctx, t.sql.ack, seqs, tokens)
	return err
}

func splitHeld(rows []heldRow) ([]int64, []int64) {
	seqs, tokens := make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		seqs[i], tokens[i] = r.seq, r.token
	}
	return seqs, tokens
}

// heartbeat extends the leases of the rows in flight every Lease/3 until
// ctx ends, and cancels the deliveries whose rows another consumer took.
func (r *receiver) heartbeat(ctx context.Context) {
	tick := time.NewTicker(r.t.opts.Lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.extend(ctx)
	}
}

func (r *receiver) extend(ctx context.Context) {
	t := r.t
	r.mu.Lock()
	ds := make([]*delivery, 0, len(r.flight))
	rows := make([]heldRow, 0, len(r.flight))
	for _, d := range r.flight {
		if !d.busy() {
			ds = append(ds, d)
			rows = append(rows, d.row)
		}
	}
	r.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	seqs, tokens := splitHeld(rows)
	extended, err := t.querySeqs(ctx, t.sql.extend, seqs, tokens, micros(t.opts.Lease))
	if err == nil && len(extended) < len(rows) {
		// Skipped rows may be locked by a handling that is deleting them,
		// or an acknowledgement: still ours while their token holds.
		var held map[int64]bool
		if held, err = t.querySeqs(ctx, t.sql.held, seqs, tokens); err == nil {
			for s := range held {
				extended[s] = true
			}
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("postgres: lease extension failed", slog.String("queue", r.queue), slog.Any("error", err))
		}
		return
	}
	for _, d := range ds {
		if !extended[d.row.seq] && !d.busy() {
			d.cancel(ErrLeaseLost)
		}
	}
}

func (t *Transport) querySeqs(ctx context.Context, sql string, args ...any) (map[int64]bool, error) {
	rows, err := t.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[int64]bool{}
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		got[s] = true
	}
	return got, rows.Err()
}

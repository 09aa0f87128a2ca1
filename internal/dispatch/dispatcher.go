package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus/backend"
	"github.com/postbus/bus/internal/loop"
)

// Dispatcher hands scheduled messages to the transport when they fall due.
// One runs on every started, receiving bus (unless Config.Dispatcher.Disabled).
//
// Loop: claim a batch of due rows with a lease; hand each to the transport;
// delete the ones accepted and record a failure (with backoff) on the others.
// A full batch loops at once. Otherwise sleep until the earlier of the next
// due time the store reports and the poll interval, or until Poke reports a
// row stored by this process (or, through DueNotifier, another one) that is
// due sooner. A row is deleted only after the transport accepted it, so a
// crash in between sends it again after the lease: at least once, same ID.
// With a look-ahead window on a store that can claim ahead, the loop is
// runAhead's instead (ahead.go).
type Dispatcher struct {
	host      Host
	store     backend.ScheduledStore
	transport string // identity of the transport: the rows this dispatcher claims
	cfg       Config
	clock     backend.Clock
	log       *slog.Logger
	limiter   *loop.RateLimiter
	wake      chan struct{}
	plan      atomic.Int64 // Unix nanoseconds of the next planned look; 0 while busy
	fetch     *Breaker     // claiming due rows
	dispatch  *Breaker     // handing rows to the transport
	lastRec   atomic.Int64 // Unix nanoseconds of the last failure recording slot taken
	misses    int          // consecutive looks that found due rows but claimed none
	skewNanos atomic.Int64 // store clock minus bus clock, for a ClockedStore
	skewAt    time.Time    // when the skew was last measured (bus clock)
	held      heldKeys     // ordering keys held back behind a failed row (order.go)
	// lastClaim is when the last claim returned without an error, rows or
	// none (Unix nanoseconds, bus clock; 0 before the first): Bus.Health.
	lastClaim atomic.Int64
	// join is the store when it joins the transport to its claims'
	// transactions (HandOverJoiner); set once run starts.
	join backend.HandOverJoiner
}

const (
	// dueRetryDelay is the first wait when the store reports a due row that
	// the claim did not return (another instance holds it, or the store's
	// clock is a little behind ours); it doubles while that goes on, up to
	// the poll interval, so a row held for a whole lease is not polled for
	// hundreds of times a second.
	dueRetryDelay = 5 * time.Millisecond
	// skewInterval is how often the dispatcher measures how far the clock
	// of a ClockedStore is from the bus's clock.
	skewInterval = 30 * time.Second
)

// New returns a dispatcher built from cfg, which reaches its bus through
// host. It does nothing until Run.
func New(cfg Config, host Host) *Dispatcher {
	return &Dispatcher{
		host: host, store: cfg.Store, transport: cfg.Identity, cfg: cfg, clock: cfg.Clock,
		log: cfg.Logger.With(slog.String("component", "dispatcher")), limiter: loop.NewRateLimiter(loop.LogInterval),
		wake:  make(chan struct{}, 1),
		fetch: cfg.Fetch, dispatch: cfg.Dispatch,
	}
}

// LastClaim is when the last claim returned without an error, rows or
// none, on the bus's clock; zero before the first.
func (d *Dispatcher) LastClaim() time.Time {
	if n := d.lastClaim.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Poke wakes the dispatcher if due is sooner than it planned to look.
func (d *Dispatcher) Poke(due time.Time) {
	if p := d.plan.Load(); p != 0 && due.UnixNano() >= p {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run claims and hands over due rows until ctx ends, then releases the
// rows it holds and waits for their settling.
func (d *Dispatcher) Run(ctx context.Context) {
	d.join = d.joiner()
	var wg sync.WaitGroup
	defer wg.Wait()
	if n, ok := d.store.(backend.DueNotifier); ok {
		wg.Go(func() { d.watch(ctx, n) })
	}
	if st, ok := d.store.(backend.AheadClaimer); ok && d.cfg.LookAhead > 0 && d.join == nil {
		d.runAhead(ctx, st)
		return
	}
	for ctx.Err() == nil {
		d.plan.Store(0)
		n, err := d.dispatchBatch(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			d.fetch.Failure(err)
			d.logError("fetch", "cannot claim due messages; retrying", err)
			d.sleep(ctx, d.fetch.Wait())
			continue
		}
		d.fetch.Success()
		if w := d.dispatch.Wait(); w > 0 {
			d.sleep(ctx, w) // the transport is failing: probe, don't hammer
			continue
		}
		if n >= d.cfg.BatchSize {
			continue
		}
		d.sleep(ctx, d.nextWait(ctx, n))
	}
}

// nextWait is how long to sleep: until the next row becomes claimable, at
// most the poll interval.
func (d *Dispatcher) nextWait(ctx context.Context, dispatched int) time.Duration {
	next, ok, err := d.store.NextDueOutgoing(ctx, d.transport)
	if err != nil {
		if ctx.Err() != nil {
			return 0 // stopping
		}
		d.logError("next-due", "cannot read the next due time", err)
		return d.cfg.PollInterval
	}
	if !ok {
		return d.cfg.PollInterval
	}
	// next is on the store's clock when it has one: compare it with the
	// store's now, so a bus clock behind the store's does not sleep
	// through due rows until the next poll.
	wait := next.Sub(d.clock.Now().Add(d.storeSkew(ctx)))
	switch {
	case wait > 0:
		d.misses = 0
		return min(wait, d.cfg.PollInterval)
	case dispatched > 0:
		d.misses = 0
		return 0
	}
	d.misses++
	return min(dueRetryDelay<<min(d.misses-1, 16), d.cfg.PollInterval)
}

func (d *Dispatcher) sleep(ctx context.Context, wait time.Duration) {
	if wait <= 0 {
		return
	}
	d.plan.Store(d.clock.Now().Add(wait).UnixNano())
	t := d.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-d.wake:
	case <-ctx.Done():
	}
}

// storeSkew returns the store's clock minus the bus's, measured at most
// every skewInterval; 0 for a store without a clock.
func (d *Dispatcher) storeSkew(ctx context.Context) time.Duration {
	cs, ok := d.store.(backend.ClockedStore)
	if !ok {
		return 0
	}
	now := d.clock.Now()
	if !d.skewAt.IsZero() && now.Sub(d.skewAt) < skewInterval && now.After(d.skewAt) {
		return time.Duration(d.skewNanos.Load())
	}
	storeNow, err := cs.StoreNow(ctx)
	if err != nil {
		return time.Duration(d.skewNanos.Load())
	}
	after := d.clock.Now()
	d.skewAt = after
	d.skewNanos.Store(int64(storeNow.Sub(now.Add(after.Sub(now) / 2))))
	return time.Duration(d.skewNanos.Load())
}

// watch relays other processes' stores to Poke, re-watching after errors.
// Due times from a backend.ClockedStore are on its clock: they are moved to the
// bus's clock before the comparison with the planned wake-up.
func (d *Dispatcher) watch(ctx context.Context, n backend.DueNotifier) {
	wake := func(due time.Time) { d.Poke(due.Add(-time.Duration(d.skewNanos.Load()))) }
	for ctx.Err() == nil {
		err := n.WatchDue(ctx, wake)
		if err != nil && ctx.Err() == nil {
			d.logError("watch", "cannot watch for new scheduled messages; polling only", err)
		}
		loop.Sleep(ctx, d.clock, d.cfg.PollInterval)
	}
}

// joiner returns the store as a backend.HandOverJoiner when it joins this bus's
// transport to its claims' transactions; nil otherwise.
func (d *Dispatcher) joiner() backend.HandOverJoiner {
	if j, ok := d.store.(backend.HandOverJoiner); ok && j.JoinsHandOver(d.cfg.Transport) {
		return j
	}
	return nil
}

// claimed notes a claim that returned without an error, at the bus's now.
func (d *Dispatcher) claimed() { d.lastClaim.Store(d.clock.Now().UnixNano()) }

func (d *Dispatcher) logError(kind, msg string, err error) {
	if d.limiter.Allow(kind, d.clock.Now()) {
		d.log.Error(msg, slog.String("failure", kind), slog.Any(logKeyError, err))
	}
}

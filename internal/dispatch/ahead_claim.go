package dispatch

import (
	"context"
	"time"

	"github.com/postbus/bus/backend"
)

// The look-ahead dispatcher's claims run in the background, one at a time,
// beside the hand-overs: while a group of rows is with the transport, the
// next claim is on its way to the store, so a burst drains at the pace of
// the slower of the two steps, not of their sum. Only the loop touches the
// heap: a claim's rows join it when the loop collects the result, before
// each hand-over group and when it wakes.
//
// A claim takes no more rows than the bound on rows held leaves room for
// (ahead_bound.go), and never one that the settling of rows
// handed over, queued or in flight, could still be deleting when the claim
// may take it back: a row whose lease ends within the window (see
// settleBatch.clearOf).

// claimResult is what a claim in the background returns to the loop.
type claimResult struct {
	c          backend.AheadClaim
	err        error
	limit      int       // the most rows it could take
	sent, recv time.Time // bus clock before and after the claim
	reading    storeReading
}

// maybeClaim starts a claim when one is due (or was asked for by a poke),
// none is in flight, and the bound on rows held leaves room.
func (a *ahead) maybeClaim(ctx context.Context) {
	d := a.d
	if a.inflight != nil || !a.claimNow && d.clock.Now().Before(a.nextClaim) || a.room() == 0 {
		return
	}
	if !a.settling.clearOf(d.clock.Now().Add(d.cfg.LookAhead)) {
		a.settling.flush(ctx, d, true)
	}
	a.claimNow = false
	limit := a.room()
	d.plan.Store(0) // a row stored from now on may be missed by the claim: wake for it
	out := make(chan claimResult, 1)
	a.inflight, a.claimLimit = out, limit
	sent := d.clock.Now()
	go func() {
		c, err := a.store.ClaimOutgoingAhead(ctx, d.transport, sent, d.cfg.LookAhead, limit, d.cfg.Lease)
		r := claimResult{c: c, err: err, limit: limit, sent: sent, recv: d.clock.Now()}
		if err == nil {
			d.claimed()
		}
		if err == nil && len(c.Rows) > 0 {
			r.reading = a.readStoreClock(ctx)
		}
		out <- r
	}()
}

// collect takes the result of the claim in flight into the heap: with
// wait, once the claim returned; else only if it already has.
func (a *ahead) collect(ctx context.Context, wait bool) {
	if a.done == nil && a.inflight != nil {
		if wait {
			r := <-a.inflight
			a.done = &r
		} else {
			select {
			case r := <-a.inflight:
				a.done = &r
			default:
			}
		}
	}
	if a.done == nil {
		return
	}
	r := *a.done
	a.done, a.inflight, a.claimLimit = nil, nil, 0
	a.finishClaim(ctx, r)
}

// finishClaim puts the rows of a claim into the heap and plans the next
// claim.
func (a *ahead) finishClaim(ctx context.Context, r claimResult) {
	d := a.d
	c, sent, recv := r.c, r.sent, r.recv
	if r.err != nil {
		if ctx.Err() != nil {
			return
		}
		d.fetch.Failure(r.err)
		d.logError("fetch", "cannot claim due messages; retrying", r.err)
		a.nextClaim = recv.Add(d.fetch.Wait())
		a.setPlan()
		return
	}
	d.fetch.Success()
	a.horizon = recv.Add(d.cfg.LookAhead)
	if len(c.Rows) > 0 {
		d.host.Emit(ctx, Event{Kind: EventClaim, Count: len(c.Rows), Start: sent})
		for i := range c.Rows {
			a.hold(&c.Rows[i], c.Now, sent, recv, r.reading)
		}
	} else {
		d.host.Emit(ctx, Event{Kind: EventClaimEmpty, Start: sent})
	}
	switch {
	case len(c.Rows) >= r.limit:
		a.nextClaim = recv // the window may hold more
	case len(c.Rows) > 0:
		d.misses = 0
		a.nextClaim = recv.Add(d.cfg.LookAhead / 2)
	default:
		a.nextClaim = recv.Add(a.idleWait(ctx))
	}
	a.setPlan()
}

// readStoreClock reads the clock of a backend.ClockedStore; zero for another store,
// or when the reading fails.
func (a *ahead) readStoreClock(ctx context.Context) storeReading {
	cs, ok := a.store.(backend.ClockedStore)
	if !ok {
		return storeReading{}
	}
	storeNow, err := cs.StoreNow(ctx)
	if err != nil {
		return storeReading{}
	}
	return storeReading{store: storeNow, bus: a.d.clock.Now()}
}

// idleWait is how long to wait after a claim that found nothing: until the
// next row is half a window away, at most the poll interval.
func (a *ahead) idleWait(ctx context.Context) time.Duration {
	d := a.d
	next, ok, err := d.store.NextDueOutgoing(ctx, d.transport)
	if err != nil {
		if ctx.Err() == nil {
			d.logError("next-due", "cannot read the next due time", err)
		}
		return d.cfg.PollInterval
	}
	if !ok {
		return d.cfg.PollInterval
	}
	if wait := next.Sub(d.clock.Now().Add(d.storeSkew(ctx))) - d.cfg.LookAhead/2; wait > 0 {
		d.misses = 0
		return min(wait, d.cfg.PollInterval)
	}
	// Due within the window, yet not claimed: another process holds it,
	// or the store's clock is a little behind ours.
	d.misses++
	return min(dueRetryDelay<<min(d.misses-1, 16), d.cfg.PollInterval)
}

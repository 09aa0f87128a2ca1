package dispatch

import (
	"container/heap"
	"context"
	"time"

	"github.com/postbus/bus/backend"
)

// The look-ahead dispatcher (Config.Dispatcher.LookAhead), for stores that
// are AheadClaimers.
//
// One claim takes every row claimable within the window, leased for the
// window plus the lease, and the dispatcher holds the rows in a heap ordered
// by the time each may be handed over. A row is handed over no sooner than
// the store says it falls due, whatever the skew between the clocks: the
// claim returns the store's now with the rows, and a row AvailableAt−Now
// after it is due at most that long after the claim returned. For a store
// with a clock (backend.ClockedStore) that bound is late by the claim's commit, so
// after a claim the dispatcher also reads the store's clock on its own, a
// read-only round trip: a reading S taken before bus time t bounds the
// row's time by t+(AvailableAt−S), and the earlier of the two bounds wins.
// Both assume that the clocks run at the same rate while the row is held;
// the reading's bound gets an allowance for them drifting apart.
//
// The next claim comes when half the window is gone, so rows are claimed
// at least half a window before they fall due, and the rows delivered are
// deleted together every aheadSettleDelay or aheadSettleRows, in the
// background. A row stored due before the window's end (or before the next
// planned claim) pokes the dispatcher, which claims at once, within the
// bound on rows held. Claims run beside the hand-overs, one at a time, and
// the rows held are bounded by what the dispatcher drains within half the
// lease (ahead_claim.go, ahead_bound.go).
//
// A row never leaves after its lease could have lapsed: its lease end is
// taken at the earliest the store can have meant, and the hand-over of a
// group stops two thirds into the lease as in dispatchBatch. On stop, the
// rows held but not handed over are released.

const (
	// aheadSettleDelay is the longest a delivered row of a look-ahead
	// dispatcher waits for others to be deleted with; aheadSettleRows
	// delivered rows are deleted at once. Each delete is a round trip to
	// the store, which costs the bus more CPU than the rows it carries: at
	// 500 rows a second this makes it one delete for 50 rows. The price is
	// that a process that dies has delivered at most this much again.
	aheadSettleDelay = 100 * time.Millisecond
	aheadSettleRows  = 256
	// aheadDrift is the rate at which a look-ahead dispatcher assumes the
	// bus's clock and a store's may drift apart while it holds a row: one
	// part in aheadDrift (1,000 ppm, twice the most ntpd slews a clock).
	aheadDrift = 1000
	// aheadHeldBatches bounds the rows a look-ahead dispatcher holds, in
	// batches of Dispatcher.BatchSize, until it measured how fast it
	// drains them (ahead_bound.go): a window with more rows due
	// is claimed as the rows held go out.
	aheadHeldBatches = 2
)

// heldRow is a row claimed ahead, waiting for its time.
type heldRow struct {
	row      backend.OutgoingMessage
	at       time.Time // hand over no sooner (bus clock)
	leaseEnd time.Time // the lease ends no sooner (bus clock)
	seq      uint64    // claim order, for rows due at the same time
}

// heldHeap orders held rows by hand-over time, then by claim order.
type heldHeap []*heldRow

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(*heldRow)) }
func (h *heldHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// ahead is the state of a look-ahead dispatcher; only its loop touches it.
type ahead struct {
	d         *Dispatcher
	store     backend.AheadClaimer
	held      heldHeap
	seq       uint64
	horizon   time.Time // rows due by then (bus clock) were claimed, unless stored since
	nextClaim time.Time
	claimNow  bool // a poke asked for a claim
	settling  settleBatch
	blocked   heldKeys // ordering keys whose held rows wait behind a failed row

	handing    int              // rows in the hand-over under way
	handRate   drainRate        // how fast hand-overs go
	inflight   chan claimResult // the claim running beside the hand-overs; nil when none
	claimLimit int              // the most rows it can take
	done       *claimResult     // its result, once sleep received it
}

// storeReading is a reading of a backend.ClockedStore's clock: the store showed
// store no later than bus on the bus's clock.
type storeReading struct{ store, bus time.Time }

// runAhead is the dispatcher's loop with a look-ahead window.
func (d *Dispatcher) runAhead(ctx context.Context, store backend.AheadClaimer) {
	a := &ahead{d: d, store: store, claimNow: true}
	defer a.stop(ctx)
	for ctx.Err() == nil {
		a.collect(ctx, false)
		a.settling.reap()
		if failed := a.handOverDue(ctx); failed && d.dispatch.Wait() > 0 {
			// The transport is failing: probe, don't hold rows meanwhile.
			a.releaseHeld(ctx)
			d.sleep(ctx, d.dispatch.Wait())
			a.claimNow = true
			continue
		}
		a.settling.maybeFlush(ctx, d, a.nextHandOver())
		a.maybeClaim(ctx)
		a.sleep(ctx)
	}
}

// hold puts a claimed row in the heap. The store read storeNow at some
// instant between sent and recv (bus clock): a time storeNow+x on its clock
// is at most recv+x on ours, and at least sent+x. A reading of the store's
// clock, when there is one, gives another upper bound.
func (a *ahead) hold(m *backend.OutgoingMessage, storeNow, sent, recv time.Time, r storeReading) {
	avail := m.AvailableAt
	if avail.IsZero() {
		avail = m.DueAt
	}
	leaseEnd := sent.Add(a.d.cfg.Lease)
	if !m.LeaseUntil.IsZero() {
		leaseEnd = sent.Add(m.LeaseUntil.Sub(storeNow))
	}
	at := recv.Add(avail.Sub(storeNow))
	if !r.bus.IsZero() {
		t := r.bus.Add(avail.Sub(r.store))
		if drift := t.Sub(r.bus) / aheadDrift; drift > 0 {
			t = t.Add(drift)
		}
		if t.Before(at) {
			at = t
		}
	}
	a.seq++
	heap.Push(&a.held, &heldRow{row: *m, at: at, leaseEnd: leaseEnd, seq: a.seq})
}

// setPlan tells poke which rows the dispatcher would miss: those due
// before the window claimed ends, or before the next claim can take them.
func (a *ahead) setPlan() {
	plan := a.nextClaim.Add(a.d.cfg.LookAhead / 2)
	if a.horizon.After(plan) {
		plan = a.horizon
	}
	a.d.plan.Store(plan.UnixNano())
}

// handOverDue hands over the held rows whose time has come, in groups of
// at most BatchSize, and queues their results for settling. The next claim
// starts as each group goes to the transport, within the bound on rows
// held. After a failed hand-over it settles at once, so that the dispatch
// breaker knows, and reports true.
func (a *ahead) handOverDue(ctx context.Context) bool {
	d := a.d
	for ctx.Err() == nil {
		a.collect(ctx, false)
		a.settling.reap()
		now := d.clock.Now()
		if len(a.held) == 0 || a.held[0].at.After(now) {
			return false
		}
		var rows []backend.OutgoingMessage
		var stopBy, settleBy time.Time
		for len(a.held) > 0 && len(rows) < d.cfg.BatchSize && !a.held[0].at.After(now) {
			h := heap.Pop(&a.held).(*heldRow)
			rows = append(rows, h.row)
			stop, by := h.leaseEnd.Add(-d.cfg.Lease/3), h.leaseEnd.Add(-d.cfg.Lease/10)
			if stopBy.IsZero() || stop.Before(stopBy) {
				stopBy, settleBy = stop, by
			}
		}
		a.handing = len(rows)
		a.maybeClaim(ctx)
		start := d.clock.Now()
		results := a.blocked.handOver(ctx, d, rows, stopBy)
		a.handRate.add(len(rows), d.clock.Now().Sub(start))
		a.handing = 0
		a.settling.add(rows, results, settleBy, now)
		for _, err := range results {
			if err != nil {
				a.settling.flush(ctx, d, true)
				return true
			}
		}
		a.settling.maybeFlush(ctx, d, a.nextHandOver())
	}
	return false
}

// nextHandOver is when the earliest held row falls due; zero when none.
func (a *ahead) nextHandOver() time.Time {
	if len(a.held) == 0 {
		return time.Time{}
	}
	return a.held[0].at
}

// sleep waits for the next held row, the next claim (when the bound on
// rows held leaves room) or the next settling, for the settling in flight,
// which makes room, or for a poke, which asks for a claim. A claim in
// flight wakes the loop with its result, and nothing else does meanwhile
// but a poke: its rows may be due first, and a sleep with a timer means
// the claim is over, as it did when claims ran in the loop.
func (a *ahead) sleep(ctx context.Context) {
	d := a.d
	if a.inflight != nil {
		select {
		case r := <-a.inflight:
			a.done = &r
		case <-d.wake:
			a.claimNow = true
		case <-ctx.Done():
		}
		return
	}
	var wake time.Time
	if a.room() > 0 {
		wake = a.nextClaim
	}
	for _, t := range []time.Time{a.nextHandOver(), a.settling.due()} {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	var timer <-chan time.Time
	if !wake.IsZero() {
		wait := wake.Sub(d.clock.Now())
		if wait <= 0 {
			return
		}
		t := d.clock.NewTimer(wait)
		defer t.Stop()
		timer = t.C()
	}
	select {
	case <-timer: // nil when nothing is planned: never ready
	case <-a.settling.finished():
	case <-d.wake:
		a.claimNow = true
	case <-ctx.Done():
	}
}

// releaseHeld releases every row held (those of a claim in flight
// included, once it returned), and settles what was handed over.
func (a *ahead) releaseHeld(ctx context.Context) {
	a.collect(ctx, true)
	if len(a.held) > 0 {
		rows := make([]backend.OutgoingMessage, len(a.held))
		results := make([]error, len(a.held))
		var settleBy time.Time
		for i, h := range a.held {
			rows[i], results[i] = h.row, a.blocked.heldBack(&h.row, a.d.clock.Now(), errNotAttempted)
			if by := h.leaseEnd.Add(-a.d.cfg.Lease / 10); settleBy.IsZero() || by.Before(settleBy) {
				settleBy = by
			}
		}
		a.held = a.held[:0]
		a.settling.add(rows, results, settleBy, a.d.clock.Now())
	}
	a.settling.flush(ctx, a.d, true)
}

// stop releases the rows held and waits for the settling of the others.
func (a *ahead) stop(ctx context.Context) { a.releaseHeld(ctx) }

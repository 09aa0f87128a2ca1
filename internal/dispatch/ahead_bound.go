package dispatch

import "time"

// The bound on the rows a look-ahead dispatcher holds.
//
// A row claimed must be handed over and settled before its lease lapses,
// or another process claims it and sends it again. The dispatcher counts
// every row it claimed and has not settled yet: held in the heap, in a
// hand-over, waiting for its settling or in it, and the limit of the claim
// in flight. It starts no claim that could take that count past
//
//	min(aheadMaxHeldBatches batches, drain rate × Lease/2)
//
// where the drain rate is the slower of its hand-overs' and its settlings'
// measured rates (rows a second). Until both were measured the bound is
// aheadHeldBatches batches. A pipeline that gets slower lowers the bound at
// once; one that gets faster raises it a quarter of the way at a time. A
// poke claims at once, but within the bound too.

const (
	// aheadMaxHeldBatches caps the rows a look-ahead dispatcher holds,
	// in batches of Dispatcher.BatchSize, however fast it drains.
	aheadMaxHeldBatches = 8
	// aheadLeaseShare is the share of the lease the rows held must drain
	// in: the rest is the margin for the claim's round trip, the settling
	// calls' retries and the clocks.
	aheadLeaseShare = 2
)

// drainRate is a measured rate of a step of the dispatcher, in rows a
// second; zero until measured.
type drainRate struct{ perSec float64 }

// add folds in a step that took rows through in took: a slower sample
// replaces the estimate, a faster one moves it a quarter of the way.
func (r *drainRate) add(rows int, took time.Duration) {
	if rows <= 0 {
		return
	}
	took = max(took, time.Microsecond) // a fake clock may not move at all
	sample := float64(rows) / took.Seconds()
	if r.perSec == 0 || sample < r.perSec {
		r.perSec = sample
		return
	}
	r.perSec += (sample - r.perSec) / 4
}

// heldBound is how many rows the dispatcher may hold, claimed and not yet
// settled; at least one, so that it always makes progress.
func (a *ahead) heldBound() int {
	d := a.d
	limit := aheadMaxHeldBatches * d.cfg.BatchSize
	hand, settle := a.handRate.perSec, a.settling.rate.perSec
	if hand == 0 || settle == 0 {
		return min(aheadHeldBatches*d.cfg.BatchSize, limit)
	}
	drain := min(hand, settle) * (d.cfg.Lease / aheadLeaseShare).Seconds()
	if drain < float64(limit) {
		limit = max(int(drain), 1)
	}
	return limit
}

// unsettled is how many rows the dispatcher claimed and has not settled
// yet, counting the limit of the claim in flight.
func (a *ahead) unsettled() int {
	return len(a.held) + a.handing + a.settling.pending() + a.claimLimit
}

// room is how many rows the next claim may take: none while the bound
// leaves less than half a batch (or half the bound, when it is lower) and
// some rows are held, so that the claims stay large.
func (a *ahead) room() int {
	bound, held := a.heldBound(), a.unsettled()
	full := min(a.d.cfg.BatchSize, bound)
	room := min(full, max(bound-held, 0))
	if room < full/2 && held > 0 {
		return 0
	}
	return room
}

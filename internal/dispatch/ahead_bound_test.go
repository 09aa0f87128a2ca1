package dispatch

import (
	"math"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

func TestDrainRateAdd(t *testing.T) {
	t.Parallel()
	type step struct {
		rows int
		took time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  float64 // rows a second
	}{
		{"unmeasured", nil, 0},
		{"no rows are no sample", []step{{0, time.Second}, {-1, time.Second}}, 0},
		{"the first sample is the rate", []step{{10, time.Second}}, 10},
		{"a slower sample replaces it", []step{{100, time.Second}, {10, time.Second}}, 10},
		{"a faster one moves a quarter of the way", []step{{10, time.Second}, {50, time.Second}}, 20},
		{"twice faster, twice a quarter", []step{{10, time.Second}, {50, time.Second}, {60, time.Second}}, 30},
		{"a step that took no time took a microsecond", []step{{3, 0}}, 3e6},
		{"nor less than one", []step{{2, time.Nanosecond}}, 2e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r drainRate
			for _, s := range tc.steps {
				r.add(s.rows, s.took)
			}
			if math.Abs(r.perSec-tc.want) > 1e-9*max(1, tc.want) {
				t.Errorf("rate %v rows/s, want %v", r.perSec, tc.want)
			}
		})
	}
}

func TestHeldBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		batch          int
		lease          time.Duration
		hand, settle   float64 // measured rates, rows a second; 0: not yet
		want, wantRoom int     // with nothing held
	}{
		{"unmeasured: two batches", 20, 6 * time.Second, 0, 0, 40, 20},
		{"hand-overs measured, settlings not", 20, 6 * time.Second, 1000, 0, 40, 20},
		{"settlings measured, hand-overs not", 20, 6 * time.Second, 0, 1000, 40, 20},
		{"fast: capped at eight batches", 20, 6 * time.Second, 1000, 1000, 160, 20},
		{"the slower rate for half the lease", 20, 6 * time.Second, 100, 40, 120, 20},
		{"settling the slower", 20, 6 * time.Second, 10, 1000, 30, 20},
		{"below a batch: room for what the bound leaves", 20, 2 * time.Second, 5, 5, 5, 5},
		{"at least one row", 20, 6 * time.Second, 0.01, 0.01, 1, 1},
		{"a batch of one", 1, 6 * time.Second, 1000, 1000, 8, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &ahead{d: &Dispatcher{cfg: Config{BatchSize: tc.batch, Lease: tc.lease}}}
			a.handRate.perSec, a.settling.rate.perSec = tc.hand, tc.settle
			if got := a.heldBound(); got != tc.want {
				t.Errorf("heldBound() = %d, want %d", got, tc.want)
			}
			if got := a.room(); got != tc.wantRoom {
				t.Errorf("room() with nothing held = %d, want %d", got, tc.wantRoom)
			}
		})
	}
}

// room leaves the claims large: none while the bound leaves less than
// half a batch (or half the bound) and rows are held.
func TestAheadRoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                           string
		held, handing, settling, claim int // rows in the heap, in a hand-over, settling, of the claim in flight
		want                           int
	}{
		{"nothing held: a batch", 0, 0, 0, 0, 20},
		{"a batch left of the bound", 10, 0, 0, 0, 20},
		{"half a batch left", 20, 10, 0, 0, 10},
		{"less than half a batch left", 20, 5, 6, 0, 0},
		{"the claim in flight counts", 20, 0, 0, 15, 0},
		{"over the bound", 40, 5, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Unmeasured rates: the bound is two batches of 20.
			a := &ahead{d: &Dispatcher{cfg: Config{BatchSize: 20, Lease: 6 * time.Second}}}
			a.held = make(heldHeap, tc.held)
			a.handing, a.claimLimit = tc.handing, tc.claim
			a.settling.rows = make([]backend.OutgoingMessage, tc.settling)
			if got := a.room(); got != tc.want {
				t.Errorf("room() = %d, want %d (unsettled %d of 40)", got, tc.want, a.unsettled())
			}
		})
	}
}

package dispatch

import (
	"container/heap"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

// hold puts a claimed row in the heap at the earliest time the store can
// mean, on the bus's clock, whatever the skew between the two clocks: the
// store's clock here is an hour ahead of the bus's.
func TestAheadHold(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second
	store := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the claim's Now, store clock
	sent := store.Add(-time.Hour)                         // bus clock before the claim
	recv := sent.Add(20 * time.Millisecond)               // and after it
	ms := time.Millisecond
	for _, tc := range []struct {
		name         string
		row          backend.OutgoingMessage
		reading      storeReading
		at, leaseEnd time.Time
	}{
		{
			name: "available in 2 s: 2 s after the claim returned; the lease from its start",
			row:  backend.OutgoingMessage{AvailableAt: store.Add(2 * time.Second)},
			at:   recv.Add(2 * time.Second), leaseEnd: sent.Add(lease),
		},
		{
			name: "no AvailableAt: the due time",
			row:  backend.OutgoingMessage{DueAt: store.Add(3 * time.Second)},
			at:   recv.Add(3 * time.Second), leaseEnd: sent.Add(lease),
		},
		{
			name: "AvailableAt wins over DueAt",
			row:  backend.OutgoingMessage{DueAt: store.Add(time.Second), AvailableAt: store.Add(3 * time.Second)},
			at:   recv.Add(3 * time.Second), leaseEnd: sent.Add(lease),
		},
		{
			name: "already due",
			row:  backend.OutgoingMessage{AvailableAt: store.Add(-time.Second)},
			at:   recv.Add(-time.Second), leaseEnd: sent.Add(lease),
		},
		{
			name: "the store's lease end, taken at the earliest it can mean",
			row:  backend.OutgoingMessage{AvailableAt: store.Add(2 * time.Second), LeaseUntil: store.Add(10 * time.Second)},
			at:   recv.Add(2 * time.Second), leaseEnd: sent.Add(10 * time.Second),
		},
		{
			name:    "a reading of the store's clock that bounds it sooner, with the drift allowance",
			row:     backend.OutgoingMessage{AvailableAt: store.Add(2 * time.Second)},
			reading: storeReading{store: store.Add(100 * ms), bus: sent.Add(50 * ms)},
			// 1.9 s after the reading, plus 1.9 s / aheadDrift.
			at: sent.Add(50*ms + 1900*ms + 1900*time.Microsecond), leaseEnd: sent.Add(lease),
		},
		{
			name:    "a reading that bounds it later is ignored",
			row:     backend.OutgoingMessage{AvailableAt: store.Add(2 * time.Second)},
			reading: storeReading{store: store.Add(-100 * ms), bus: recv.Add(10 * ms)},
			at:      recv.Add(2 * time.Second), leaseEnd: sent.Add(lease),
		},
		{
			name:    "a reading past the row's time: no drift allowance",
			row:     backend.OutgoingMessage{AvailableAt: store},
			reading: storeReading{store: store.Add(500 * ms), bus: sent.Add(10 * ms)},
			at:      sent.Add(-490 * ms), leaseEnd: sent.Add(lease),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &ahead{d: &Dispatcher{cfg: Config{Lease: lease}}}
			a.hold(&tc.row, store, sent, recv, tc.reading)
			if len(a.held) != 1 {
				t.Fatalf("%d rows held, want 1", len(a.held))
			}
			h := a.held[0]
			if !h.at.Equal(tc.at) {
				t.Errorf("handed over at %v after sent, want %v", h.at.Sub(sent), tc.at.Sub(sent))
			}
			if !h.leaseEnd.Equal(tc.leaseEnd) {
				t.Errorf("lease ends %v after sent, want %v", h.leaseEnd.Sub(sent), tc.leaseEnd.Sub(sent))
			}
		})
	}
}

// The heap hands rows over by their time, then in claim order.
func TestAheadHoldOrder(t *testing.T) {
	t.Parallel()
	store := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &ahead{d: &Dispatcher{cfg: Config{Lease: time.Minute}}}
	for _, r := range []struct {
		id string
		in time.Duration
	}{{"c", 3 * time.Second}, {"a1", time.Second}, {"b", 2 * time.Second}, {"a2", time.Second}} {
		a.hold(&backend.OutgoingMessage{ID: r.id, AvailableAt: store.Add(r.in)}, store, store, store, storeReading{})
	}
	if got := a.nextHandOver(); !got.Equal(store.Add(time.Second)) {
		t.Errorf("next hand-over at %v, want 1s", got.Sub(store))
	}
	var got []string
	for len(a.held) > 0 {
		got = append(got, heap.Pop(&a.held).(*heldRow).row.ID)
	}
	if want := []string{"a1", "a2", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("handed over %v, want %v", got, want)
	}
	if !a.nextHandOver().IsZero() {
		t.Errorf("next hand-over with nothing held: %v, want none", a.nextHandOver())
	}
}

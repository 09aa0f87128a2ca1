package main

import (
	"sync"
	"time"
)

// tracker counts the receipts of one batch of messages, numbered base to
// base+n-1, and keeps each one's lateness. It is safe for concurrent use.
type tracker struct {
	base int64
	n    int

	mu         sync.Mutex
	counts     []int32
	ids        []string
	late       []int64 // nanoseconds, first receipt only
	received   int     // distinct sequence numbers received
	duplicates int
	mismatched int // a sequence number received with two different IDs
	unexpected int // sequence numbers outside [base, base+n)
	early      int
	first      time.Time // earliest handled time
	last       time.Time // latest handled time
	done       chan struct{}
}

func newTracker(base int64, n int) *tracker {
	t := &tracker{
		base: base, n: n,
		counts: make([]int32, n), ids: make([]string, n), late: make([]int64, n),
		done: make(chan struct{}),
	}
	if n == 0 {
		close(t.done)
	}
	return t
}

// record notes that the message numbered seq, with the given ID, was handled
// at the given time, late by lateness (negative: early).
func (t *tracker) record(seq int64, id string, at time.Time, lateness time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lateness < 0 {
		t.early++
	}
	if t.first.IsZero() || at.Before(t.first) {
		t.first = at
	}
	if at.After(t.last) {
		t.last = at
	}
	i := seq - t.base
	if i < 0 || i >= int64(t.n) {
		t.unexpected++
		return
	}
	t.counts[i]++
	if t.counts[i] > 1 {
		t.duplicates++
		if t.ids[i] != id {
			t.mismatched++
		}
		return
	}
	t.ids[i] = id
	t.late[i] = int64(lateness)
	t.received++
	if t.received == t.n {
		close(t.done)
	}
}

// tally is what a tracker saw.
type tally struct {
	Received   int
	Duplicates int
	Mismatched int
	Unexpected int
	Early      int
	Missing    int
	First      time.Time
	Last       time.Time
	Lateness   []time.Duration // of the messages received, in no order
}

func (t *tracker) tally() tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := tally{
		Received: t.received, Duplicates: t.duplicates, Mismatched: t.mismatched,
		Unexpected: t.unexpected, Early: t.early, Missing: t.n - t.received,
		First: t.first, Last: t.last, Lateness: make([]time.Duration, 0, t.received),
	}
	for i, c := range t.counts {
		if c > 0 {
			out.Lateness = append(out.Lateness, time.Duration(t.late[i]))
		}
	}
	return out
}

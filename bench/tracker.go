package main

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// tracker counts the receipts of one batch of messages, numbered base to
// base+n-1, and keeps each one's lateness. It is safe for concurrent use.
// A keyed tracker (newKeyedTracker) takes any sequence number that is not
// negative instead, each new one in a slot of its own.
type tracker struct {
	base int64
	n    int
	keys map[int64]int // keyed tracker: sequence number → slot

	mu         sync.Mutex
	counts     []int32
	ids        []string
	late       []int64 // nanoseconds, first receipt only
	received   int     // distinct sequence numbers received
	duplicates int
	mismatched int      // a sequence number received with two different IDs
	unexpected int      // sequence numbers outside [base, base+n)
	strays     []string // the first few of them: sequence number, ID, lateness
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

// newKeyedTracker returns a tracker for sequence numbers not known in
// advance (the ticks of jittered schedules): every one that is not
// negative counts, none is missing, and the caller judges which were due
// (each).
func newKeyedTracker() *tracker {
	t := newTracker(0, 0)
	t.keys = map[int64]int{}
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
	i, ok := t.slot(seq)
	if !ok {
		if len(t.strays) < maxStrays {
			t.strays = append(t.strays, fmt.Sprintf("%d %s %v", seq, id, lateness))
		}
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
	if t.keys == nil && t.received == t.n {
		close(t.done)
	}
}

// slot returns the index of seq's counts, and false for a sequence number
// the tracker does not take.
func (t *tracker) slot(seq int64) (int64, bool) {
	if t.keys == nil {
		i := seq - t.base
		return i, i >= 0 && i < int64(t.n)
	}
	if seq < 0 {
		return 0, false
	}
	i, ok := t.keys[seq]
	if !ok {
		i = len(t.counts)
		t.keys[seq] = i
		t.counts, t.ids, t.late = append(t.counts, 0), append(t.ids, ""), append(t.late, 0)
	}
	return int64(i), true
}

// each calls f with every sequence number a keyed tracker received, and
// its first receipt's lateness.
func (t *tracker) each(f func(seq int64, late time.Duration)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for seq, i := range t.keys {
		f(seq, time.Duration(t.late[i]))
	}
}

// maxStrays bounds the unexpected receipts a tracker describes.
const maxStrays = 5

// tally is what a tracker saw.
type tally struct {
	Received   int
	Duplicates int
	Mismatched int
	Unexpected int
	Strays     []string // the first few unexpected receipts: sequence number, ID, lateness
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
		Unexpected: t.unexpected, Early: t.early, Missing: max(t.n-t.received, 0),
		Strays: slices.Clone(t.strays), First: t.first, Last: t.last, Lateness: make([]time.Duration, 0, t.received),
	}
	for i, c := range t.counts {
		if c > 0 {
			out.Lateness = append(out.Lateness, time.Duration(t.late[i]))
		}
	}
	return out
}

package dispatch

import (
	"sync"
	"time"

	"github.com/postbus/bus/backend"
)

// Breaker watches one kind of operation (the bus's store calls, the
// dispatcher's claims, its hand-overs). It trips when failures have gone on
// without a success for its time to trigger, calling onTrip once per trip
// with when the failures began and the latest; a success closes it.
type Breaker struct {
	name    string
	trigger time.Duration
	clock   backend.Clock
	onTrip  func(since time.Time, err error)
	// onChange, when set, hears the breaker open (true) and close again.
	onChange func(open bool)

	mu     sync.Mutex
	since  time.Time // zero while healthy
	open   bool
	fails  int // consecutive failures
	probes int // failures since the breaker opened, for the probe backoff
}

// NewBreaker returns a closed breaker named name that trips after failures
// for trigger on clock, calling onTrip, and, when onChange is not nil,
// onChange each time it opens (true) or closes.
func NewBreaker(name string, trigger time.Duration, clock backend.Clock, onTrip func(since time.Time, err error), onChange func(open bool)) *Breaker {
	return &Breaker{name: name, trigger: trigger, clock: clock, onTrip: onTrip, onChange: onChange}
}

// Name is the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Success notes an operation that succeeded: the breaker closes.
func (b *Breaker) Success() {
	b.mu.Lock()
	wasOpen := b.open
	b.since, b.open, b.fails, b.probes = time.Time{}, false, 0, 0
	b.mu.Unlock()
	if wasOpen && b.onChange != nil {
		b.onChange(false)
	}
}

// Failure notes an operation that failed with err.
func (b *Breaker) Failure(err error) {
	now := b.clock.Now()
	b.mu.Lock()
	b.fails++
	if b.open {
		b.probes++
	}
	if b.since.IsZero() {
		b.since = now
	}
	trip := !b.open && now.Sub(b.since) >= b.trigger
	if trip {
		b.open = true
	}
	since := b.since
	b.mu.Unlock()
	if trip {
		if b.onChange != nil {
			b.onChange(true)
		}
		b.onTrip(since, err)
	}
}

// Wait is how long to pause before the next attempt: a short pause while
// failures are fresh, then, once the breaker is open, a probe interval that
// starts at one second and doubles up to a minute.
func (b *Breaker) Wait() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails == 0 {
		return 0
	}
	if !b.open {
		return 250 * time.Millisecond
	}
	w := time.Second
	for i := 0; i < b.probes && w < time.Minute; i++ {
		w *= 2
	}
	return min(w, time.Minute)
}

package bus

import (
	"fmt"
	"sync"
	"time"
)

// CriticalError is what Config.OnCriticalError receives when a circuit
// breaker trips.
type CriticalError struct {
	Breaker string    // "store", "fetch" or "dispatch"
	Since   time.Time // when the failures began
	Err     error     // the latest failure
}

// Error describes the failure.
func (e *CriticalError) Error() string {
	return fmt.Sprintf("bus: %s circuit breaker tripped: failing since %s: %v", e.Breaker, e.Since.Format(time.RFC3339), e.Err)
}

// Unwrap returns the latest failure.
func (e *CriticalError) Unwrap() error { return e.Err }

// breaker watches one kind of operation. It trips when failures have gone on
// without a success for its time to trigger, calling onTrip once per trip;
// a success closes it.
type breaker struct {
	name    string
	trigger time.Duration
	clock   Clock
	onTrip  func(error)
	// onChange, when set, hears the breaker open (true) and close again.
	onChange func(open bool)

	mu     sync.Mutex
	since  time.Time // zero while healthy
	open   bool
	fails  int // consecutive failures
	probes int // failures since the breaker opened, for the probe backoff
}

func newBreaker(name string, trigger time.Duration, clock Clock, onTrip func(error)) *breaker {
	return &breaker{name: name, trigger: trigger, clock: clock, onTrip: onTrip}
}

func (b *breaker) success() {
	b.mu.Lock()
	wasOpen := b.open
	b.since, b.open, b.fails, b.probes = time.Time{}, false, 0, 0
	b.mu.Unlock()
	if wasOpen && b.onChange != nil {
		b.onChange(false)
	}
}

func (b *breaker) failure(err error) {
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
		b.onTrip(&CriticalError{Breaker: b.name, Since: since, Err: err})
	}
}

// wait is how long to pause before the next attempt: a short pause while
// failures are fresh, then, once the breaker is open, a probe interval that
// starts at one second and doubles up to a minute.
func (b *breaker) wait() time.Duration {
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

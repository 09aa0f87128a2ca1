package bustest

import (
	"context"
	"sync"
	"time"

	"github.com/postbus/bus"
)

var _ bus.Clock = (*FakeClock)(nil)

// FakeClock is a bus.Clock that moves only when told to, so tests of delays,
// leases and retries run without sleeping. Give it to Config.Clock.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*fakeTimer]struct{}
	changed chan struct{} // closed and replaced whenever the timer set changes
}

// NewFakeClock returns a clock stopped at now.
func NewFakeClock(now time.Time) *FakeClock {
	return &FakeClock{now: now, timers: map[*fakeTimer]struct{}{}, changed: make(chan struct{})}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when Advance moves the clock past d.
func (c *FakeClock) NewTimer(d time.Duration) bus.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d and fires every timer that is due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			delete(c.timers, t)
		}
	}
	c.notifyLocked()
}

// WaitForTimers blocks until at least n timers are pending (the code under
// test has gone to sleep), or ctx ends; it reports whether they were.
func (c *FakeClock) WaitForTimers(ctx context.Context, n int) bool {
	for {
		c.mu.Lock()
		pending, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if pending >= n {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

func (c *FakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	clock *FakeClock
	at    time.Time
	ch    chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.timers[t]
	delete(c.timers, t)
	if ok {
		c.notifyLocked()
	}
	return ok
}

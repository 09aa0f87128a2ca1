// Package loop holds what the bus's background loops share: a sleep on
// the bus's clock that ends with its context, a context detached from its
// caller's cancellation, and a limit on how often a failure is logged.
package loop

import (
	"context"
	"sync"
	"time"

	"github.com/postbus/bus/backend"
)

// LogInterval is how often one kind of failure is logged at most.
const LogInterval = 10 * time.Second

// Sleep waits d on clock, returning false if ctx ended first.
func Sleep(ctx context.Context, clock backend.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Detach returns a ctx that keeps ctx's values but not its cancellation,
// bounded by d: for work that must finish although the caller's ctx ended
// (moving a message to the error queue, settling a batch), yet must not
// wait for ever on a broker or database that waits out an outage.
func Detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// RateLimiter lets one log line per key through per interval, so a dead
// database produces a line every few seconds, not one per message.
type RateLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	last     map[string]time.Time
}

// NewRateLimiter returns a RateLimiter of one line per key per interval.
func NewRateLimiter(interval time.Duration) *RateLimiter {
	return &RateLimiter{interval: interval, last: map[string]time.Time{}}
}

// Allow reports whether a line of key may be logged at now, and if so
// counts it.
func (r *RateLimiter) Allow(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[key]; ok && now.Sub(t) < r.interval {
		return false
	}
	r.last[key] = now
	return true
}

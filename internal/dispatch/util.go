package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/postbus/bus/backend"
)

// Log keys, the bus's own.
const (
	logKeyError     = "error"
	logKeyMessageID = "message_id"
)

// rateLimiter lets one log line per key through per interval, so a dead
// database produces a line every few seconds, not one per row.
type rateLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	last     map[string]time.Time
}

func newRateLimiter(interval time.Duration) *rateLimiter {
	return &rateLimiter{interval: interval, last: map[string]time.Time{}}
}

func (r *rateLimiter) allow(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[key]; ok && now.Sub(t) < r.interval {
		return false
	}
	r.last[key] = now
	return true
}

// sleepCtx waits d on clock, returning false if ctx ended first.
func sleepCtx(ctx context.Context, clock backend.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// detach returns a ctx that keeps ctx's values but not its cancellation,
// bounded by d: a stopping dispatcher still settles what it sent, yet does
// not wait for ever on a database that waits out an outage.
func detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

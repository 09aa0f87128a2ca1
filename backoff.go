package bus

import (
	"math/rand/v2"
	"time"
)

// ExponentialBackoff returns a RetryConfig.DelayedBackoff that waits base,
// 2×base, 4×base, … capped at limit, each wait drawn uniformly from its
// upper half (50% to 100%), so retries of many failed messages spread out.
func ExponentialBackoff(base, limit time.Duration) func(n int) time.Duration {
	return func(n int) time.Duration {
		w := base
		for i := 1; i < n && w < limit; i++ {
			w *= 2
		}
		w = min(w, limit)
		if w <= 1 {
			return w
		}
		half := w / 2
		return half + rand.N(w-half+1)
	}
}

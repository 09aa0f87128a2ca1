package bus

import (
	"slices"
	"sync"
	"time"
)

// latenessWindow keeps the lateness (handling start minus due time) of the
// last latenessSamples delayed messages handled, for Metrics.
type latenessWindow struct {
	mu      sync.Mutex
	samples [latenessSamples]time.Duration
	n       int // samples held, up to latenessSamples
	next    int // slot the next sample overwrites
}

// latenessSamples is how many recent delayed deliveries Metrics summarises.
const latenessSamples = 1024

func (w *latenessWindow) record(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples[w.next] = d
	w.next = (w.next + 1) % latenessSamples
	w.n = min(w.n+1, latenessSamples)
}

// percentiles returns the median and 99th percentile, zero without samples.
func (w *latenessWindow) percentiles() (p50, p99 time.Duration) {
	w.mu.Lock()
	s := slices.Clone(w.samples[:w.n])
	w.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[(len(s)-1)/2], s[(len(s)-1)*99/100]
}

package loop

import (
	"testing"
	"time"
)

func TestRateLimiterOneLinePerKeyPerInterval(t *testing.T) {
	t.Parallel()
	r := NewRateLimiter(10 * time.Second)
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"a", 0, true},
		{"a", 5 * time.Second, false},
		{"b", 5 * time.Second, true},
		{"a", 10 * time.Second, true},
		{"a", 19 * time.Second, false},
		{"b", 15 * time.Second, true},
	} {
		if got := r.Allow(c.key, at.Add(c.at)); got != c.want {
			t.Errorf("Allow(%q, +%v) = %v, want %v", c.key, c.at, got, c.want)
		}
	}
}

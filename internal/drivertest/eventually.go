package drivertest

import (
	"testing"
	"time"

	"github.com/postbus/bus/internal/poll"
)

// Eventually checks cond until it returns true, with pauses of at most
// poll.Interval, and fails the test (t.Fatalf) when within passes first,
// saying what it waited for (msgf and args, as for fmt.Sprintf). Call it
// from the test's goroutine. It is how tests wait for what another
// goroutine does, instead of sleeping for a guessed while.
func Eventually(t testing.TB, within time.Duration, cond func() bool, msgf string, args ...any) {
	t.Helper()
	poll.Eventually(t, within, cond, msgf, args...)
}

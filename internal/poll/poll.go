// Package poll holds Eventually, the one way Postbus tests wait for a
// condition that another goroutine makes true. It depends on the standard
// library only, so bustest can use it; the driver modules and the core's
// tests call it as drivertest.Eventually.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Interval bounds the pause between two checks of the condition: the first
// pause is a tenth of it, and each next one doubles up to Interval.
const Interval = 10 * time.Millisecond

// Eventually checks cond at once, then again after short pauses, until it
// returns true, and fails the test with t.Fatalf when within passes first:
// the message says how long it waited and for what (msgf and args, as for
// fmt.Sprintf: what the test waited for). Like t.Fatalf it must be called
// from the goroutine running the test. cond runs on that goroutine too,
// so it may use t.
func Eventually(t testing.TB, within time.Duration, cond func() bool, msgf string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := Interval / 10
	for !cond() {
		if !time.Now().Before(deadline) {
			t.Fatalf("waited %v, in vain, for %s", within, fmt.Sprintf(msgf, args...))
			return
		}
		time.Sleep(pause)
		pause = min(pause*2, Interval)
	}
}

package main

import (
	"testing"
	"time"
)

// A receiver that fell behind still drains: settle waits while the count
// of missing messages falls, and stops once it stayed put for the idle
// wait, or at the cap.
func TestPatienceWaitsWhileMissingMessagesStillArrive(t *testing.T) {
	t.Parallel()
	start := at(0)
	p := newPatience(start, time.Minute, 10*time.Minute)
	// Draining 2,000 every 5 s: still waiting long after the first minute.
	missing := 14000
	for s := 5.0; missing > 0; s += 5 {
		missing -= 2000
		if !p.wait(at(s), missing) {
			t.Fatalf("stopped at %.0fs with %d missing and falling", s, missing)
		}
	}
	// Stuck at 3: waits out the idle minute after the last fall, no more.
	p = newPatience(start, time.Minute, 10*time.Minute)
	p.wait(at(5), 10)
	p.wait(at(10), 3)
	if !p.wait(at(69), 3) {
		t.Error("stopped before a minute passed without progress")
	}
	if p.wait(at(70), 3) {
		t.Error("still waiting a minute after the last progress")
	}
	// The cap holds even while the count falls.
	p = newPatience(start, time.Minute, 2*time.Minute)
	for s, n := 5.0, 1000; s < 120; s, n = s+5, n-1 {
		p.wait(at(s), n)
	}
	if p.wait(at(120), 1) {
		t.Error("waiting past the cap")
	}
}

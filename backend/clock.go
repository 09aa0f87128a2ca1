package backend

import "time"

// Clock tells the bus the time and makes its timers. The dispatcher, the
// retry schedule and the message timers all read it, so tests can move time
// instead of sleeping (bustest.NewFakeClock).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the bus uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

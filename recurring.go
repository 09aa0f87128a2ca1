package bus

import (
	"fmt"
	"time"
)

// Schedule says when a recurring message is due: Next returns the first
// tick strictly after after, or the zero time when there is none. It has
// the method of robfig/cron's Schedule, so cron.ParseStandard("0 2 * * *")
// can be used as it is; the core parses no cron syntax itself. A Schedule
// that also implements fmt.Stringer is shown to operators by that text.
//
// Every process that declares a schedule computes its ticks on its own, so
// a Schedule must be deterministic: the same after gives the same tick on
// every machine (with cron, name the time zone in the spec, as in
// "CRON_TZ=Europe/Berlin 0 2 * * *", rather than relying on time.Local).
type Schedule interface {
	Next(after time.Time) time.Time
}

// Every returns a Schedule that ticks at every multiple of d since the Unix
// epoch (UTC), so every process computes the same ticks whenever it
// started: Every(time.Hour) ticks on the hour, Every(24*time.Hour) at
// midnight UTC. A d of zero or less never ticks, and AddRecurring refuses
// it: the interval must be positive.
func Every(d time.Duration) Schedule { return every{d: d} }

type every struct{ d time.Duration }

// Next returns the first multiple of d since the epoch after t.
func (e every) Next(t time.Time) time.Time {
	if e.d <= 0 {
		return time.Time{}
	}
	n := t.UnixNano()
	next := n - n%int64(e.d) + int64(e.d)
	if n < 0 && n%int64(e.d) != 0 {
		next -= int64(e.d)
	}
	return time.Unix(0, next).UTC()
}

// String returns "every <d>".
func (e every) String() string { return "every " + e.d.String() }

// MissedPolicy says what a schedule does about ticks that passed while no
// process that declares it was running (see Recurring.Missed).
type MissedPolicy uint8

// The missed-tick policies.
const (
	// MissedOnce (the default) sends one occurrence for the whole gap, at
	// once: the latest missed tick's. Occurrences stored for earlier
	// ticks that passed are cancelled.
	MissedOnce MissedPolicy = iota
	// MissedAll sends one occurrence per missed tick, at once, up to
	// MaxMissedTicks (the latest ones).
	MissedAll
	// MissedSkip sends none, and cancels occurrences stored for ticks
	// that passed; the schedule goes on from the next tick.
	MissedSkip
)

// MaxMissedTicks bounds the occurrences MissedAll sends for one gap: the
// latest MaxMissedTicks missed ticks are sent, the earlier ones skipped.
const MaxMissedTicks = 1000

// String returns the policy's name.
func (p MissedPolicy) String() string {
	switch p {
	case MissedOnce:
		return "once"
	case MissedAll:
		return "all"
	case MissedSkip:
		return "skip"
	}
	return fmt.Sprintf("MissedPolicy(%d)", uint8(p))
}

// Recurring declares a message sent on a schedule (Bus.AddRecurring).
type Recurring struct {
	// Name is the schedule's key in the persistence: 1 to 100 of
	// [A-Za-z0-9_.-]. Every process that declares the same Name shares
	// one schedule, and each tick is sent once.
	Name string
	// Schedule says when the message is due. Required; it must yield a
	// tick after the time AddRecurring is called.
	Schedule Schedule
	// Message builds the message for a tick. Required. It is called when
	// the occurrence is stored, which is ahead of the tick.
	Message func(tick time.Time) any
	// Publish: false sends the message as a command (to its Route, or to
	// To in Options); true publishes it as an event.
	Publish bool
	// Options apply to every occurrence: any send option except
	// DeliverAfter and DeliverAt (the schedule says when).
	Options []Option
	// Missed says what to do about ticks missed while no declaring
	// process ran. Default MissedOnce.
	Missed MissedPolicy
	// Policy refines when ticks are sent: a catch-up window, jitter, a
	// start and an end, a maximum number of runs, overlap.
	Policy RecurringPolicy
}

// RecurringInfo describes a stored schedule (Bus.Recurrings).
type RecurringInfo struct {
	Name     string
	Schedule string    // the schedule's text (fmt.Stringer), or its Go type
	Next     time.Time // the next tick stored or planned; zero when paused or unknown
	Last     time.Time // the latest tick that fell due with an occurrence stored; zero if none yet
	Paused   bool
	// Declared is true when this bus declares the schedule. A schedule no
	// running process declares any more can be removed with
	// Bus.DeleteRecurring.
	Declared bool
	// Generation counts the definitions the schedule has had; the
	// latest declaration with another definition wins (see AddRecurring).
	Generation int64
	// Runtime is true for a schedule made at runtime (SetRecurring).
	Runtime bool
	// Skipped counts the ticks the policies skipped (missed ticks under
	// MissedOnce and MissedSkip, past CatchUp, overlapping ones).
	Skipped int
	// Superseded is true when this bus declares the schedule with another
	// definition than the stored one, which a process that started later
	// declared: this bus stores no occurrences for it until it restarts
	// with that definition. Schedule shows the stored definition.
	Superseded bool
}

// Headers of a recurring occurrence.
const (
	// HeaderRecurringName is the schedule's name on each occurrence.
	HeaderRecurringName = "postbus.recurring.name"
	// HeaderRecurringTick is the tick the occurrence stands for (RFC 3339
	// with nanoseconds, UTC); for TriggerRecurring, the trigger's time.
	HeaderRecurringTick = "postbus.recurring.tick"
)

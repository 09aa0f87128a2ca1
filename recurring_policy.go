package bus

import (
	"fmt"
	"time"

	"github.com/postbus/bus/internal/recurring"
)

// OverlapPolicy says what a schedule does with a tick whose occurrence
// would start while the previous one is still being handled
// (RecurringPolicy.Overlap).
type OverlapPolicy uint8

// The overlap policies.
const (
	// OverlapAllow (the default) hands every occurrence over when due,
	// whether or not the previous one finished.
	OverlapAllow OverlapPolicy = iota
	// OverlapSkip skips an occurrence while the previous one of the same
	// schedule has not finished its handling, on an endpoint whose
	// persistence is the schedule's store; after OverlapTimeout the
	// previous one counts as finished. A skipped occurrence is logged and
	// counted (RecurringInfo.Skipped).
	OverlapSkip
)

// String returns the policy's name.
func (p OverlapPolicy) String() string {
	switch p {
	case OverlapAllow:
		return "allow"
	case OverlapSkip:
		return "skip"
	}
	return fmt.Sprintf("OverlapPolicy(%d)", uint8(p))
}

// RecurringPolicy refines when a schedule's ticks are sent, for schedules
// declared in code (Recurring.Policy) and made at runtime
// (RecurringSpec.Policy) alike. The zero value changes nothing.
type RecurringPolicy struct {
	// CatchUp bounds what a schedule sends for ticks missed while no
	// process ran it: missed ticks older than CatchUp at the time a
	// process finds them are skipped, whatever Missed says, and so are
	// occurrences stored for them. Zero: no bound.
	CatchUp time.Duration
	// Jitter shifts every tick of the schedule by one offset in
	// [0, Jitter), derived from the schedule's name (so the same on every
	// process and after every restart), at millisecond precision: 10,000
	// schedules at "0 0 * * *" with a Jitter of an hour spread their
	// ticks over that hour instead of firing in one millisecond. Zero: no
	// shift.
	Jitter time.Duration
	// Start and End bound the ticks: none before Start or after End
	// (after the jitter shift). Zero: unbounded.
	Start, End time.Time
	// MaxRuns stops the schedule after this many occurrences stored for
	// its ticks (triggers and backfills do not count). Zero: unbounded.
	MaxRuns int
	// Overlap says what to do with a tick whose previous occurrence is
	// still being handled. Default OverlapAllow.
	Overlap OverlapPolicy
	// OverlapTimeout is how long, with OverlapSkip, an occurrence that
	// started its handling counts as running: a process that died while
	// handling it does not stop the schedule for longer. Default 1 hour.
	OverlapTimeout time.Duration
}

// defaultOverlapTimeout is RecurringPolicy.OverlapTimeout's default.
const defaultOverlapTimeout = time.Hour

// check returns the field at fault and why, or "" when p is valid.
func (p RecurringPolicy) check() (field, reason string) {
	switch {
	case p.CatchUp < 0:
		return "Policy.CatchUp", "must not be negative"
	case p.Jitter < 0:
		return "Policy.Jitter", "must not be negative"
	case p.Jitter > 0 && p.Jitter < time.Millisecond:
		return "Policy.Jitter", "must be at least a millisecond: ticks are kept at millisecond precision"
	case !p.Start.IsZero() && !p.End.IsZero() && !p.End.After(p.Start):
		return "Policy.End", "must be after Start"
	case p.MaxRuns < 0:
		return "Policy.MaxRuns", "must not be negative"
	case p.Overlap > OverlapSkip:
		return "Policy.Overlap", fmt.Sprintf("unknown policy %d", p.Overlap)
	case p.OverlapTimeout < 0:
		return "Policy.OverlapTimeout", "must not be negative"
	}
	return "", ""
}

// shape returns s with p's jitter and window applied, for the schedule
// name: the schedule whose ticks are stored.
func (p RecurringPolicy) shape(name string, s Schedule) Schedule {
	return recurring.Shape(name, s, p.Jitter, p.Start, p.End)
}

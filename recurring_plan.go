package bus

import (
	"time"

	"github.com/postbus/bus/internal/recurring"
)

// Planning one step of a recurring schedule is the pure function
// recurring.Step (see the comment at the top of recurring_run.go): this
// file hands it the record, the definition and what the stepping process
// knows of itself.

// planParams are what planning needs from the process that steps.
type planParams struct {
	grace   time.Duration // Dispatcher.PollInterval + Dispatcher.Lease
	pass    time.Duration // how long the stepping process's passes take
	refresh time.Duration // how often a declared schedule is stepped anyway
	stepped time.Time     // when this process last stepped the schedule; zero when never or untracked
}

// planRecurring plans a step of e, at generation gen, from rec at now.
func planRecurring(e *recurringEntry, gen int64, rec RecurringRecord, now time.Time, pp planParams) recurring.Plan {
	return recurring.Step(planState(rec), now, recurring.Params{
		Schedule:    e.r.Schedule,
		Generation:  gen,
		Fingerprint: e.fingerprint,
		Missed:      recurring.Missed(e.r.Missed),
		CatchUp:     e.r.Policy.CatchUp,
		MaxRuns:     e.r.Policy.MaxRuns,
		Grace:       pp.grace,
		Pass:        pp.pass,
		Refresh:     pp.refresh,
		Stepped:     pp.stepped,
	})
}

// planState is what planning reads of rec.
func planState(rec RecurringRecord) recurring.State {
	return recurring.State{Generation: rec.Generation, Fingerprint: rec.Fingerprint, Paused: rec.Paused,
		Last: rec.Last, Alive: rec.Alive, Ticks: rec.Ticks, Runs: rec.Runs, Skipped: rec.Skipped, Due: rec.Due}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

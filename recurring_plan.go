package bus

import (
	"slices"
	"time"
)

// Planning one step of a recurring schedule: which ticks to store, which
// occurrences to cancel, and what the record says afterwards (see the
// comment at the top of recurring_run.go).

// recurringPlan is what one step stores, cancels and records.
type recurringPlan struct {
	store   []time.Time // ticks to store occurrences for
	cancel  []string    // occurrence IDs to cancel
	last    time.Time
	ticks   []time.Time
	wake    time.Time // when the next step of a declared schedule is due
	due     time.Time // the record's next Due: the first tick ahead; zero when none
	runs    int64     // the record's new Runs
	skipped int64     // the record's new Skipped
	skips   int       // ticks this step skipped
}

// planParams are what planning needs from the process that steps.
type planParams struct {
	grace   time.Duration // Dispatcher.PollInterval + Dispatcher.Lease
	pass    time.Duration // how long the stepping process's passes take
	refresh time.Duration // how often a declared schedule is stepped anyway
}

// planRecurring plans a step for rec at now (see the comment at the top
// of recurring_run.go). A tick that passed is missed only when no
// declaring process was known to run across it: the record's liveness
// mark (rec.Alive) lapsed longer than the grace period ago, the tick is
// after the mark, and this bus did not step the schedule within the grace
// period before it (ran). Ticks between the record's Last and
// now that some process ran across are late, stored each once: a pass
// over many schedules on a loaded store can last longer than the ticks
// stored ahead, and a process that starts meanwhile must not take them
// for missed. An occurrence stored for a tick that passed is never
// cancelled or replaced unless its tick was missed too. The policy's
// CatchUp skips missed ticks older than its window, and MaxRuns bounds
// the occurrences stored.
func planRecurring(e *recurringEntry, rec RecurringRecord, now time.Time, ran bool, pp planParams) recurringPlan {
	grace := pp.grace
	pol := e.r.Policy
	var passed, future []time.Time
	for _, t := range rec.Ticks {
		if t.After(now) {
			future = append(future, t)
		} else {
			passed = append(passed, t)
		}
	}
	p := recurringPlan{last: rec.Last, runs: rec.Runs, skipped: rec.Skipped}
	var cancelled []time.Time
	if rec.Paused {
		cancelled = future
		future = nil
		if rec.Last.After(now) {
			p.last = now // resuming plans the ticks after now again
		}
	} else {
		from := rec.Last
		if from.IsZero() {
			from = now // a new schedule starts now: nothing was missed
		}
		// Someone ran across the ticks through alive: the record's mark,
		// widened by twice this bus's own pass, since a store slow for
		// this bus is slow for the others too. A mark that lapsed within
		// the grace period does not tell a process that stopped from one
		// that is behind (a pass or a dispatcher slower than the mark
		// allowed for, which a process that just started cannot measure),
		// so nothing before now counts as missed yet.
		alive := rec.Alive
		if !alive.IsZero() {
			alive = alive.Add(2 * pp.pass)
		}
		if ran || !rec.Alive.IsZero() && !now.After(rec.Alive.Add(grace)) {
			alive = now
		}
		var missed, late []time.Time
		if from.Before(now) {
			if through := minTime(alive, now); through.After(from) {
				late = latestTicks(e.r.Schedule, from, through, MaxMissedTicks)
			}
			if after := maxTime(from, alive); after.Before(now) {
				missed = latestTicks(e.r.Schedule, after, now, MaxMissedTicks)
			}
		}
		var stale []time.Time // stored, passed after alive, and missed
		for _, t := range passed {
			if t.After(alive) && (len(missed) > 0 || !t.After(now.Add(-grace))) {
				stale = append(stale, t)
			}
		}
		if pol.CatchUp > 0 { // missed ticks, and their occurrences, past the window are skipped
			window := now.Add(-pol.CatchUp)
			old := func(t time.Time) bool { return t.Before(window) }
			n := len(missed)
			missed = slices.DeleteFunc(missed, old)
			p.skips += n - len(missed)
			for _, t := range stale {
				if old(t) {
					cancelled = append(cancelled, t)
				}
			}
			stale = slices.DeleteFunc(stale, old)
		}
		switch e.r.Missed {
		case MissedOnce:
			if len(missed) > 0 {
				p.skips += len(missed) - 1
				p.store = missed[len(missed)-1:]
				cancelled = append(cancelled, stale...)
			} else if len(stale) > 1 {
				cancelled = append(cancelled, stale[:len(stale)-1]...)
			}
		case MissedAll:
			p.store = missed
		case MissedSkip:
			p.skips += len(missed)
			cancelled = append(cancelled, stale...)
		}
		p.store = append(late, p.store...)
		p.last = maxTime(rec.Last, now)
		// At least recurringAhead ticks, and those through twice the
		// latest pass, while the record can remember them.
		ahead := now.Add(2 * pp.pass)
		for cursor := p.last; ; {
			t := e.r.Schedule.Next(cursor)
			if t.IsZero() || !t.After(cursor) {
				break
			}
			if len(future) >= recurringAhead && (t.After(ahead) || len(future) >= recurringKeep/2) {
				break
			}
			p.store = append(p.store, t)
			future = append(future, t)
			p.last, cursor = t, t
		}
		if pol.MaxRuns > 0 { // the runs left, the earliest ticks first
			left := max(int64(pol.MaxRuns)-rec.Runs+int64(len(cancelled)), 0)
			if int64(len(p.store)) > left {
				drop := p.store[left:]
				future = slices.DeleteFunc(future, func(t time.Time) bool { return slices.ContainsFunc(drop, t.Equal) })
				p.store = p.store[:left]
			}
		}
	}
	p.runs = max(p.runs+int64(len(p.store))-int64(len(cancelled)), 0)
	p.skipped += int64(p.skips)
	for _, t := range cancelled {
		p.cancel = append(p.cancel, recurringID(e.r.Name, t, ""))
	}
	p.ticks = keepTicks(passed, future, p.store, cancelled, now.Add(-grace))
	p.wake = now.Add(pp.refresh)
	for _, t := range p.ticks {
		if t.After(now) {
			if t.Before(p.wake) {
				p.wake = t
			}
			if !rec.Paused {
				p.due = t
			}
			break
		}
	}
	return p
}

// keepTicks returns the ticks a record remembers after a step: those
// stored and not cancelled, after since, plus the latest that passed,
// at most recurringKeep of them, ascending.
func keepTicks(passed, future, stored, cancelled []time.Time, since time.Time) []time.Time {
	all := slices.Concat(passed, future, stored)
	slices.SortFunc(all, time.Time.Compare)
	all = slices.CompactFunc(all, func(a, b time.Time) bool { return a.UnixMilli() == b.UnixMilli() })
	all = slices.DeleteFunc(all, func(t time.Time) bool {
		return slices.ContainsFunc(cancelled, func(c time.Time) bool { return c.UnixMilli() == t.UnixMilli() })
	})
	first := 0
	for first < len(all)-1 && !all[first+1].After(since) {
		first++ // keep the latest tick before since, drop the earlier ones
	}
	all = all[first:]
	if len(all) > recurringKeep {
		all = all[len(all)-recurringKeep:]
	}
	return all
}

// latestTicks returns the latest limit ticks of s in (from, to], ascending.
// A long gap is not walked from its start: the walk begins at the shortest
// span back from to that holds limit ticks.
func latestTicks(s Schedule, from, to time.Time, limit int) []time.Time {
	start := from
	for span := time.Second; ; span *= 2 {
		c := to.Add(-span)
		if !c.After(from) || span > 100*365*24*time.Hour {
			break
		}
		if len(walkTicks(s, c, to, limit)) >= limit {
			start = c
			break
		}
	}
	return walkTicks(s, start, to, limit)
}

// walkTicks returns the last limit ticks of s in (from, to], ascending.
func walkTicks(s Schedule, from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := s.Next(from); !t.IsZero() && !t.After(to) && t.After(from); from, t = t, s.Next(t) {
		out = append(out, t)
		if len(out) > 2*limit {
			out = append(out[:0], out[len(out)-limit:]...)
		}
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
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

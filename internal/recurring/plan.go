package recurring

import (
	"slices"
	"time"
)

// Missed says what a step does about missed ticks. Its values are those
// of the bus's MissedPolicy, in the same order.
type Missed uint8

// The missed-tick policies.
const (
	// MissedOnce stores the latest missed tick and cancels the occurrences
	// stored for earlier missed ones.
	MissedOnce Missed = iota
	// MissedAll stores every missed tick, up to MaxMissed (the latest).
	MissedAll
	// MissedSkip stores none and cancels the occurrences stored for missed
	// ticks.
	MissedSkip
)

const (
	// MaxMissed bounds the missed (and the late) ticks one step stores.
	MaxMissed = 1000
	// Ahead is how many ticks after now a schedule keeps stored.
	Ahead = 2
	// Keep bounds the ticks a record remembers.
	Keep = 32
)

// State is what a step reads from the schedule's record.
type State struct {
	Generation  int64       // the definition's generation
	Fingerprint string      // the definition's fingerprint
	Paused      bool        // the schedule is paused
	Last        time.Time   // the latest tick dealt with; zero for a new schedule
	Alive       time.Time   // the liveness mark; zero when none was set
	Ticks       []time.Time // the ticks the record remembers, ascending
	Runs        int64       // occurrences stored for ticks so far
	Skipped     int64       // ticks the policies skipped so far
	Due         time.Time   // the record's Due (runtime schedules)
}

// Params are the schedule's definition and what the stepping process
// knows of itself.
type Params struct {
	Schedule    Schedule // the shaped schedule (Shape)
	Generation  int64    // the generation the stepping process runs
	Fingerprint string   // the definition the stepping process runs
	Missed      Missed
	CatchUp     time.Duration // missed ticks older than this are skipped; 0: no bound
	MaxRuns     int           // occurrences stored for ticks at most; 0: no bound
	// Grace is how long a liveness mark that lapsed, or this process's own
	// previous step, still counts as someone running across the ticks
	// (Dispatcher.PollInterval + Dispatcher.Lease).
	Grace time.Duration
	// Pass is how long the stepping process's passes over its due
	// schedules take.
	Pass time.Duration
	// Refresh is how often a declared schedule is stepped anyway.
	Refresh time.Duration
	// Stepped is when the stepping process last stepped this schedule;
	// zero when never (or when it does not track it).
	Stepped time.Time
}

// Plan is what one step stores, cancels and records.
type Plan struct {
	// Superseded is true when the record holds another definition than
	// the process's: the step does nothing else.
	Superseded bool
	Store      []time.Time // ticks to store occurrences for
	Cancel     []time.Time // ticks whose stored occurrences to cancel
	Last       time.Time   // the record's new Last
	Ticks      []time.Time // the ticks the record remembers
	Wake       time.Time   // when the next step of a declared schedule is due
	Due        time.Time   // the record's next Due: the first tick ahead; zero when none
	Runs       int64       // the record's new Runs
	Skipped    int64       // the record's new Skipped
	Skips      int         // ticks this step skipped
}

// Idle reports whether the plan writes nothing to a record in state s
// (a runtime record's Due apart).
func (p Plan) Idle(s State) bool {
	return len(p.Store) == 0 && len(p.Cancel) == 0 && p.Skips == 0 && (!s.Paused || p.Last.Equal(s.Last))
}

// Step plans a step of the schedule whose record is s at now. A tick that
// passed is missed only when no declaring process was known to run across
// it: the record's liveness mark lapsed longer than the grace period ago,
// the tick is after the mark (widened by twice the process's own pass),
// and the process did not step the schedule within the grace period
// before. Ticks between the record's Last and now that some process ran
// across are late, stored each once. An occurrence stored for a tick that
// passed is never cancelled or replaced unless its tick was missed too.
// CatchUp skips missed ticks older than its window, and MaxRuns bounds
// the occurrences stored. A paused schedule cancels the ticks stored
// ahead and stores none. A record with another definition (Generation or
// Fingerprint) is superseded: nothing is planned.
func Step(s State, now time.Time, pp Params) Plan {
	if s.Generation != pp.Generation || s.Fingerprint != pp.Fingerprint {
		return Plan{Superseded: true, Last: s.Last, Ticks: s.Ticks, Runs: s.Runs, Skipped: s.Skipped, Due: s.Due,
			Wake: now.Add(pp.Refresh)}
	}
	grace := pp.Grace
	ran := !pp.Stepped.IsZero() && now.Sub(pp.Stepped) <= grace
	var passed, future []time.Time
	for _, t := range s.Ticks {
		if t.After(now) {
			future = append(future, t)
		} else {
			passed = append(passed, t)
		}
	}
	p := Plan{Last: s.Last, Runs: s.Runs, Skipped: s.Skipped}
	var cancelled []time.Time
	if s.Paused {
		cancelled = future
		future = nil
		if s.Last.After(now) {
			p.Last = now // resuming plans the ticks after now again
		}
	} else {
		var stored []time.Time
		stored, cancelled, future = planActive(s, now, pp, ran, passed, future, &p)
		p.Store = stored
		p.Last = maxTime(s.Last, now)
		// At least Ahead ticks, and those through twice the latest pass,
		// while the record can remember them.
		ahead := now.Add(2 * pp.Pass)
		for cursor := p.Last; ; {
			t := pp.Schedule.Next(cursor)
			if t.IsZero() || !t.After(cursor) {
				break
			}
			if len(future) >= Ahead && (t.After(ahead) || len(future) >= Keep/2) {
				break
			}
			p.Store = append(p.Store, t)
			future = append(future, t)
			p.Last, cursor = t, t
		}
		if pp.MaxRuns > 0 { // the runs left, the earliest ticks first
			left := max(int64(pp.MaxRuns)-s.Runs+int64(len(cancelled)), 0)
			if int64(len(p.Store)) > left {
				drop := p.Store[left:]
				future = slices.DeleteFunc(future, func(t time.Time) bool { return slices.ContainsFunc(drop, t.Equal) })
				p.Store = p.Store[:left]
			}
		}
	}
	p.Runs = max(p.Runs+int64(len(p.Store))-int64(len(cancelled)), 0)
	p.Skipped += int64(p.Skips)
	p.Cancel = cancelled
	p.Ticks = keepTicks(passed, future, p.Store, cancelled, now.Add(-grace))
	p.Wake = now.Add(pp.Refresh)
	for _, t := range p.Ticks {
		if t.After(now) {
			if t.Before(p.Wake) {
				p.Wake = t
			}
			if !s.Paused {
				p.Due = t
			}
			break
		}
	}
	return p
}

// planActive plans the ticks that passed since the record's Last for a
// schedule that is not paused: it returns the late and missed ticks to
// store, the ticks to cancel and the future ticks left, and counts the
// ticks it skips in p.
func planActive(s State, now time.Time, pp Params, ran bool, passed, future []time.Time, p *Plan) (store, cancelled, left []time.Time) {
	grace := pp.Grace
	from := s.Last
	if from.IsZero() {
		from = now // a new schedule starts now: nothing was missed
	}
	// Someone ran across the ticks through alive: the record's mark,
	// widened by twice this process's own pass, since a store slow for
	// this process is slow for the others too. A mark that lapsed within
	// the grace period does not tell a process that stopped from one that
	// is behind (a pass or a dispatcher slower than the mark allowed for,
	// which a process that just started cannot measure), so nothing before
	// now counts as missed yet.
	alive := s.Alive
	if !alive.IsZero() {
		alive = alive.Add(2 * pp.Pass)
	}
	if ran || !s.Alive.IsZero() && !now.After(s.Alive.Add(grace)) {
		alive = now
	}
	var missed, late []time.Time
	if from.Before(now) {
		if through := minTime(alive, now); through.After(from) {
			late = latestTicks(pp.Schedule, from, through, MaxMissed)
		}
		if after := maxTime(from, alive); after.Before(now) {
			missed = latestTicks(pp.Schedule, after, now, MaxMissed)
		}
	}
	var stale []time.Time // stored, passed after alive, and missed
	for _, t := range passed {
		if t.After(alive) && (len(missed) > 0 || !t.After(now.Add(-grace))) {
			stale = append(stale, t)
		}
	}
	if pp.CatchUp > 0 { // missed ticks, and their occurrences, past the window are skipped
		window := now.Add(-pp.CatchUp)
		old := func(t time.Time) bool { return t.Before(window) }
		n := len(missed)
		missed = slices.DeleteFunc(missed, old)
		p.Skips += n - len(missed)
		for _, t := range stale {
			if old(t) {
				cancelled = append(cancelled, t)
			}
		}
		stale = slices.DeleteFunc(stale, old)
	}
	switch pp.Missed {
	case MissedOnce:
		if len(missed) > 0 {
			p.Skips += len(missed) - 1
			store = missed[len(missed)-1:]
			cancelled = append(cancelled, stale...)
		} else if len(stale) > 1 {
			cancelled = append(cancelled, stale[:len(stale)-1]...)
		}
	case MissedAll:
		store = missed
	case MissedSkip:
		p.Skips += len(missed)
		cancelled = append(cancelled, stale...)
	}
	return append(late, store...), cancelled, future
}

// keepTicks returns the ticks a record remembers after a step: those
// stored and not cancelled, after since, plus the latest that passed,
// at most Keep of them, ascending.
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
	if len(all) > Keep {
		all = all[len(all)-Keep:]
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

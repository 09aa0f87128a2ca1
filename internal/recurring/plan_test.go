package recurring

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// every ticks at each multiple of d since the epoch.
type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	return t.Truncate(d).Add(d)
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// m is the i-th minute after t0.
func m(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }

// ms lists minutes after t0.
func ms(i ...int) []time.Time {
	var out []time.Time
	for _, n := range i {
		out = append(out, m(n))
	}
	return out
}

// span lists the minutes from a to b.
func span(a, b int) []time.Time {
	var out []time.Time
	for i := a; i <= b; i++ {
		out = append(out, m(i))
	}
	return out
}

const (
	grace   = 31 * time.Second
	refresh = 10 * time.Second
)

// params are a minute schedule's parameters at generation 1.
func params(f func(*Params)) Params {
	pp := Params{Schedule: every(time.Minute), Generation: 1, Fingerprint: "f", Grace: grace, Refresh: refresh}
	if f != nil {
		f(&pp)
	}
	return pp
}

// state is a record at generation 1 that stored ticks up to Last.
func state(f func(*State)) State {
	s := State{Generation: 1, Fingerprint: "f"}
	if f != nil {
		f(&s)
	}
	return s
}

// want is what a test checks of a plan; nil slices must be empty.
type want struct {
	superseded bool
	store      []time.Time
	cancel     []time.Time
	last       time.Time
	ticks      []time.Time
	due        time.Time
	wake       time.Time
	runs       int64
	skips      int
	idle       bool
}

// outage is a record whose process stepped at 0:40 and stored m1 and m2,
// then stopped: its mark lapsed long before now.
func outage(s *State) {
	s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(0).Add(40*time.Second), 2
}

func TestStep(t *testing.T) {
	tests := []struct {
		name string
		s    State
		now  time.Time
		pp   Params
		want want
	}{
		{
			name: "a new schedule stores the next two ticks and misses nothing",
			s:    state(nil), now: m(0).Add(10 * time.Second), pp: params(nil),
			want: want{store: ms(1, 2), last: m(2), ticks: ms(1, 2), due: m(1), wake: m(0).Add(20 * time.Second), runs: 2},
		},
		{
			name: "a schedule stored ahead does nothing",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(0).Add(31*time.Second), 2
			}),
			now: m(0).Add(30 * time.Second), pp: params(nil),
			want: want{last: m(2), ticks: ms(1, 2), due: m(1), wake: m(0).Add(40 * time.Second), runs: 2, idle: true},
		},
		{
			name: "a tick that falls due is topped up",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(0).Add(31*time.Second), 2
			}),
			now: m(1).Add(500 * time.Millisecond), pp: params(nil),
			want: want{store: ms(3), last: m(3), ticks: ms(1, 2, 3), due: m(2), wake: m(1).Add(10500 * time.Millisecond), runs: 3},
		},
		{
			name: "a slow pass keeps the ticks through twice the pass stored",
			s:    state(nil), now: m(0).Add(10 * time.Second), pp: params(func(p *Params) { p.Pass = 2 * time.Minute }),
			want: want{store: span(1, 4), last: m(4), ticks: span(1, 4), due: m(1), wake: m(0).Add(20 * time.Second), runs: 4},
		},
		{
			name: "missed, once: the latest missed tick, earlier ones skipped and their occurrences cancelled",
			s:    state(outage), now: m(10).Add(5 * time.Second), pp: params(nil),
			want: want{store: ms(10, 11, 12), cancel: ms(1, 2), last: m(12), ticks: ms(10, 11, 12), due: m(11),
				wake: m(10).Add(15 * time.Second), runs: 3, skips: 7},
		},
		{
			name: "missed, all: every missed tick, stored occurrences kept",
			s:    state(outage), now: m(10).Add(5 * time.Second), pp: params(func(p *Params) { p.Missed = MissedAll }),
			want: want{store: span(3, 12), last: m(12), ticks: span(9, 12), due: m(11), wake: m(10).Add(15 * time.Second), runs: 12},
		},
		{
			name: "missed, skip: none sent, stored occurrences cancelled",
			s:    state(outage), now: m(10).Add(5 * time.Second), pp: params(func(p *Params) { p.Missed = MissedSkip }),
			want: want{store: ms(11, 12), cancel: ms(1, 2), last: m(12), ticks: ms(11, 12), due: m(11),
				wake: m(10).Add(15 * time.Second), runs: 2, skips: 8},
		},
		{
			name: "a record with no mark after its Last is an outage",
			s:    state(func(s *State) { s.Last, s.Runs = m(2), 2 }), now: m(5).Add(time.Second), pp: params(nil),
			want: want{store: ms(5, 6, 7), last: m(7), ticks: ms(5, 6, 7), due: m(6), wake: m(5).Add(11 * time.Second), runs: 5, skips: 2},
		},
		{
			name: "a mark lapsed within the grace period: the ticks since Last are late, stored each once",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(3).Add(10*time.Second), 2
			}),
			now: m(3).Add(30 * time.Second), pp: params(nil),
			want: want{store: ms(3, 4, 5), last: m(5), ticks: ms(2, 3, 4, 5), due: m(4), wake: m(3).Add(40 * time.Second), runs: 5},
		},
		{
			name: "late under MissedSkip too: a short stop is not an outage",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(3).Add(10*time.Second), 2
			}),
			now: m(3).Add(30 * time.Second), pp: params(func(p *Params) { p.Missed = MissedSkip }),
			want: want{store: ms(3, 4, 5), last: m(5), ticks: ms(2, 3, 4, 5), due: m(4), wake: m(3).Add(40 * time.Second), runs: 5},
		},
		{
			name: "this process stepped within the grace period: late, not missed",
			s:    state(outage), now: m(3).Add(30 * time.Second),
			pp:   params(func(p *Params) { p.Stepped = m(3).Add(5 * time.Second) }),
			want: want{store: ms(3, 4, 5), last: m(5), ticks: ms(2, 3, 4, 5), due: m(4), wake: m(3).Add(40 * time.Second), runs: 5},
		},
		{
			name: "this process stepped before the grace period: missed",
			s:    state(outage), now: m(3).Add(30 * time.Second),
			pp: params(func(p *Params) { p.Stepped = m(2).Add(50 * time.Second) }),
			want: want{store: ms(3, 4, 5), cancel: ms(1, 2), last: m(5), ticks: ms(3, 4, 5), due: m(4),
				wake: m(3).Add(40 * time.Second), runs: 3},
		},
		{
			name: "the mark widened by twice the own pass: ticks up to it are late, after it missed",
			s:    state(outage), now: m(10).Add(5 * time.Second), pp: params(func(p *Params) { p.Pass = 2 * time.Minute }),
			want: want{store: []time.Time{m(3), m(4), m(10), m(11), m(12), m(13), m(14)}, last: m(14),
				ticks: []time.Time{m(4), m(10), m(11), m(12), m(13), m(14)}, due: m(11), wake: m(10).Add(15 * time.Second), runs: 9, skips: 5},
		},
		{
			name: "missed, skip: an occurrence whose tick passed after the lapsed mark is cancelled",
			s:    state(outage), now: m(1).Add(50 * time.Second), pp: params(func(p *Params) { p.Missed = MissedSkip }),
			want: want{store: ms(3), cancel: ms(1), last: m(3), ticks: ms(2, 3), due: m(2), wake: m(2), runs: 2},
		},
		{
			name: "missed, once: such an occurrence is left to the dispatcher",
			s:    state(outage), now: m(1).Add(50 * time.Second), pp: params(nil),
			want: want{store: ms(3), last: m(3), ticks: ms(1, 2, 3), due: m(2), wake: m(2), runs: 3},
		},
		{
			name: "missed, once: of several such occurrences the latest is kept",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(3), ms(1, 2, 3), m(0).Add(40*time.Second), 3
			}),
			now: m(2).Add(50 * time.Second), pp: params(nil),
			want: want{store: ms(4), cancel: ms(1), last: m(4), ticks: ms(2, 3, 4), due: m(3), wake: m(3), runs: 3},
		},
		{
			name: "paused: the ticks stored ahead are cancelled and Last moves back to now",
			s: state(func(s *State) {
				s.Paused, s.Last, s.Ticks, s.Alive, s.Runs = true, m(3), ms(1, 2, 3), m(1), 3
			}),
			now: m(1).Add(30 * time.Second), pp: params(nil),
			want: want{cancel: ms(2, 3), last: m(1).Add(30 * time.Second), ticks: ms(1), wake: m(1).Add(40 * time.Second), runs: 1},
		},
		{
			name: "paused over ticks: nothing stored, nothing missed",
			s: state(func(s *State) {
				s.Paused, s.Last, s.Ticks, s.Runs = true, m(1).Add(30*time.Second), ms(1), 1
			}),
			now: m(9), pp: params(nil),
			want: want{last: m(1).Add(30 * time.Second), ticks: ms(1), wake: m(9).Add(refresh), runs: 1, idle: true},
		},
		{
			name: "resumed after a long pause (Last moved to the resume): the paused-over ticks are not sent",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(9).Add(500*time.Millisecond), ms(1), m(1), 1
			}),
			now: m(9).Add(time.Second), pp: params(nil),
			want: want{store: ms(10, 11), last: m(11), ticks: ms(1, 10, 11), due: m(10), wake: m(9).Add(11 * time.Second), runs: 3},
		},
		{
			name: "superseded by a later generation: nothing planned",
			s:    state(func(s *State) { outage(s); s.Generation = 2 }), now: m(10), pp: params(nil),
			want: want{superseded: true, last: m(2), ticks: ms(1, 2), wake: m(10).Add(refresh), runs: 2, idle: true},
		},
		{
			name: "superseded by another definition: nothing planned",
			s:    state(func(s *State) { outage(s); s.Fingerprint = "g" }), now: m(10), pp: params(nil),
			want: want{superseded: true, last: m(2), ticks: ms(1, 2), wake: m(10).Add(refresh), runs: 2, idle: true},
		},
		{
			name: "CatchUp, all: missed ticks and occurrences older than the window are skipped",
			s:    state(outage), now: m(10).Add(5 * time.Second),
			pp: params(func(p *Params) { p.Missed, p.CatchUp = MissedAll, 3*time.Minute }),
			want: want{store: span(8, 12), cancel: ms(1, 2), last: m(12), ticks: span(9, 12), due: m(11),
				wake: m(10).Add(15 * time.Second), runs: 5, skips: 5},
		},
		{
			name: "CatchUp, once: the window first, then the policy",
			s:    state(outage), now: m(10).Add(5 * time.Second),
			pp: params(func(p *Params) { p.CatchUp = 3 * time.Minute }),
			want: want{store: ms(10, 11, 12), cancel: ms(1, 2), last: m(12), ticks: ms(10, 11, 12), due: m(11),
				wake: m(10).Add(15 * time.Second), runs: 3, skips: 7},
		},
		{
			name: "CatchUp does not touch late ticks",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1, 2), m(3).Add(10*time.Second), 2
			}),
			now: m(3).Add(30 * time.Second), pp: params(func(p *Params) { p.CatchUp = time.Second }),
			want: want{store: ms(3, 4, 5), last: m(5), ticks: ms(2, 3, 4, 5), due: m(4), wake: m(3).Add(40 * time.Second), runs: 5},
		},
		{
			name: "Start and End: the ticks in the window, a tick at Start counts",
			s:    state(nil), now: m(0).Add(10 * time.Second),
			pp:   params(func(p *Params) { p.Schedule = Shape("w", every(time.Minute), 0, m(5), m(7)) }),
			want: want{store: ms(5, 6), last: m(6), ticks: ms(5, 6), due: m(5), wake: m(0).Add(20 * time.Second), runs: 2},
		},
		{
			name: "End: the last tick stored, then none",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(6), ms(5, 6), m(5).Add(time.Second), 2
			}),
			now: m(5).Add(time.Second), pp: params(func(p *Params) { p.Schedule = Shape("w", every(time.Minute), 0, m(5), m(7)) }),
			want: want{store: ms(7), last: m(7), ticks: ms(5, 6, 7), due: m(6), wake: m(5).Add(11 * time.Second), runs: 3},
		},
		{
			name: "End passed: nothing more stored",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(7), ms(5, 6, 7), m(7), 3
			}),
			now: m(7).Add(time.Second), pp: params(func(p *Params) { p.Schedule = Shape("w", every(time.Minute), 0, m(5), m(7)) }),
			want: want{last: m(7).Add(time.Second), ticks: ms(6, 7), wake: m(7).Add(11 * time.Second), runs: 3, idle: true},
		},
		{
			name: "MaxRuns: the earliest ticks up to the runs left",
			s:    state(nil), now: m(0).Add(10 * time.Second), pp: params(func(p *Params) { p.MaxRuns = 1 }),
			want: want{store: ms(1), last: m(2), ticks: ms(1), due: m(1), wake: m(0).Add(20 * time.Second), runs: 1},
		},
		{
			name: "MaxRuns reached: nothing more stored",
			s: state(func(s *State) {
				s.Last, s.Ticks, s.Alive, s.Runs = m(2), ms(1), m(1), 1
			}),
			now: m(1).Add(time.Second), pp: params(func(p *Params) { p.MaxRuns = 1 }),
			want: want{last: m(4), ticks: ms(1), wake: m(1).Add(11 * time.Second), runs: 1, idle: true},
		},
		{
			name: "MaxRuns: a cancelled occurrence gives its run back",
			s:    state(outage), now: m(1).Add(50 * time.Second),
			pp:   params(func(p *Params) { p.Missed, p.MaxRuns = MissedSkip, 2 }),
			want: want{store: ms(3), cancel: ms(1), last: m(3), ticks: ms(2, 3), due: m(2), wake: m(2), runs: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Step(tc.s, tc.now, tc.pp)
			w := tc.want
			check := func(what string, got, want []time.Time) {
				t.Helper()
				if !slices.EqualFunc(got, want, time.Time.Equal) {
					t.Errorf("%s = %v, want %v", what, minutes(got), minutes(want))
				}
			}
			if p.Superseded != w.superseded {
				t.Errorf("Superseded = %v, want %v", p.Superseded, w.superseded)
			}
			check("Store", p.Store, w.store)
			check("Cancel", p.Cancel, w.cancel)
			check("Ticks", p.Ticks, w.ticks)
			for _, c := range []struct {
				what      string
				got, want time.Time
			}{{"Last", p.Last, w.last}, {"Due", p.Due, w.due}, {"Wake", p.Wake, w.wake}} {
				if !c.got.Equal(c.want) {
					t.Errorf("%s = %s, want %s", c.what, minute(c.got), minute(c.want))
				}
			}
			if p.Runs != w.runs || p.Skips != w.skips || p.Skipped != tc.s.Skipped+int64(w.skips) {
				t.Errorf("Runs, Skips, Skipped = %d, %d, %d; want %d, %d, %d", p.Runs, p.Skips, p.Skipped, w.runs, w.skips, tc.s.Skipped+int64(w.skips))
			}
			if p.Idle(tc.s) != w.idle {
				t.Errorf("Idle = %v, want %v", p.Idle(tc.s), w.idle)
			}
		})
	}
}

// minute shows t as minutes and seconds after t0.
func minute(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return fmt.Sprintf("m%v", t.Sub(t0))
}

func minutes(ts []time.Time) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, minute(t))
	}
	return out
}

// TestStepMissedAllBound: MissedAll stores at most MaxMissed missed ticks,
// the latest ones, however long the gap.
func TestStepMissedAllBound(t *testing.T) {
	now := t0.Add(48 * time.Hour)
	p := Step(state(func(s *State) { s.Last = t0 }), now, params(func(p *Params) {
		p.Schedule, p.Missed = every(time.Second), MissedAll
	}))
	missed := p.Store[:len(p.Store)-Ahead]
	if len(missed) != MaxMissed || !missed[0].Equal(now.Add(-(MaxMissed-1)*time.Second)) || !missed[len(missed)-1].Equal(now) {
		t.Fatalf("stored %d missed ticks from %v to %v, want the latest %d up to %v", len(missed), missed[0], missed[len(missed)-1], MaxMissed, now)
	}
}

// TestStepIsPure: planning twice from the same state gives the same plan
// and leaves the state's ticks alone.
func TestStepIsPure(t *testing.T) {
	s := state(outage)
	ticks := slices.Clone(s.Ticks)
	a := Step(s, m(10), params(nil))
	b := Step(s, m(10), params(nil))
	if !slices.EqualFunc(a.Store, b.Store, time.Time.Equal) || !slices.EqualFunc(a.Cancel, b.Cancel, time.Time.Equal) ||
		!slices.EqualFunc(s.Ticks, ticks, time.Time.Equal) {
		t.Fatalf("two plans from one state differ (%v, %v) or changed it (%v)", a.Store, b.Store, s.Ticks)
	}
}

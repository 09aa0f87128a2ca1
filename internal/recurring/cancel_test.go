package recurring

import (
	"slices"
	"testing"
	"time"
)

func TestCancelAhead(t *testing.T) {
	look := 250 * time.Millisecond
	tests := []struct {
		name    string
		s       State
		now     time.Time
		restart bool
		cancel  []time.Time
		ticks   []time.Time
		last    time.Time
		runs    int64
		idle    bool
	}{
		{
			name: "pause: the ticks not yet due are cancelled, Last moves back to now",
			s:    state(func(s *State) { s.Last, s.Ticks, s.Runs = m(3), ms(1, 2, 3), 3 }),
			now:  m(1).Add(time.Second), cancel: ms(2, 3), ticks: ms(1), last: m(1).Add(time.Second), runs: 1,
		},
		{
			name: "pause: a tick due now is not cancelled",
			s:    state(func(s *State) { s.Last, s.Ticks, s.Runs = m(3), ms(1, 2, 3), 3 }),
			now:  m(2), cancel: ms(3), ticks: ms(1, 2), last: m(2), runs: 2,
		},
		{
			name: "pause of a paused schedule: nothing to do",
			s:    state(func(s *State) { s.Paused, s.Last, s.Ticks, s.Runs = true, m(1), ms(1), 1 }),
			now:  m(5), ticks: ms(1), last: m(1), runs: 1, idle: true,
		},
		{
			name: "new definition: the ticks after the look-ahead are cancelled, Last moves there",
			s:    state(func(s *State) { s.Last, s.Ticks, s.Runs = m(3), ms(1, 2, 3), 3 }),
			now:  m(2).Add(-100 * time.Millisecond), restart: true,
			cancel: ms(3), ticks: ms(1, 2), last: m(2).Add(150 * time.Millisecond), runs: 2,
		},
		{
			name: "new definition of a schedule with no ticks ahead: Last still moves to the look-ahead",
			s:    state(func(s *State) { s.Last, s.Ticks, s.Runs = m(1), ms(1), 1 }),
			now:  m(5), restart: true, ticks: ms(1), last: m(5).Add(look), runs: 1,
		},
		{
			name: "runs never go below zero",
			s:    state(func(s *State) { s.Last, s.Ticks = m(3), ms(2, 3) }),
			now:  m(1), cancel: ms(2, 3), last: m(1),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := CancelAhead(tc.s, tc.now, look, tc.restart)
			if !slices.EqualFunc(c.Cancel, tc.cancel, time.Time.Equal) || !slices.EqualFunc(c.Ticks, tc.ticks, time.Time.Equal) {
				t.Errorf("Cancel, Ticks = %v, %v; want %v, %v", minutes(c.Cancel), minutes(c.Ticks), minutes(tc.cancel), minutes(tc.ticks))
			}
			if !c.Last.Equal(tc.last) || c.Runs != tc.runs || c.Idle(tc.s) != tc.idle {
				t.Errorf("Last, Runs, Idle = %s, %d, %v; want %s, %d, %v", minute(c.Last), c.Runs, c.Idle(tc.s), minute(tc.last), tc.runs, tc.idle)
			}
		})
	}
}

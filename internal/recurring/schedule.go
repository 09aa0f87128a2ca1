package recurring

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// Schedule says when a schedule ticks: Next returns the first tick strictly
// after after, or the zero time when there is none. It has the method of
// the bus's Schedule, so every bus schedule is one.
type Schedule interface {
	Next(after time.Time) time.Time
}

// Shape returns s with a policy's jitter and window applied, for the
// schedule name: the schedule whose ticks are stored. A zero jitter
// shifts nothing; a zero start or end leaves that side unbounded.
func Shape(name string, s Schedule, jitter time.Duration, start, end time.Time) Schedule {
	if jitter > 0 {
		s = Shifted{S: s, By: JitterOffset(name, jitter)}
	}
	if !start.IsZero() || !end.IsZero() {
		s = Windowed{S: s, Start: start, End: end}
	}
	return s
}

// JitterOffset is the offset in [0, jitter) of the schedule name, whole
// milliseconds, from a SHA-256 of the name: the same on every process.
func JitterOffset(name string, jitter time.Duration) time.Duration {
	sum := sha256.Sum256([]byte("postbus.recurring.jitter\x00" + name))
	ms := int64(jitter / time.Millisecond)
	if ms <= 0 {
		return 0
	}
	return time.Duration(binary.BigEndian.Uint64(sum[:8])%uint64(ms)) * time.Millisecond
}

// Shifted is a schedule whose ticks are all moved by the same offset.
type Shifted struct {
	S  Schedule
	By time.Duration
}

// Next returns the first shifted tick after t.
func (j Shifted) Next(t time.Time) time.Time {
	n := j.S.Next(t.Add(-j.By))
	if n.IsZero() {
		return n
	}
	return n.Add(j.By)
}

// String shows the schedule and its offset.
func (j Shifted) String() string { return fmt.Sprintf("%s +%v", Text(j.S), j.By) }

// Windowed is a schedule with no tick before Start or after End (each
// unbounded when zero).
type Windowed struct {
	S          Schedule
	Start, End time.Time
}

// Next returns the first tick after t within the window.
func (w Windowed) Next(t time.Time) time.Time {
	if !w.Start.IsZero() && t.Before(w.Start) {
		t = w.Start.Add(-time.Nanosecond) // a tick at start counts
	}
	n := w.S.Next(t)
	if n.IsZero() || !w.End.IsZero() && n.After(w.End) {
		return time.Time{}
	}
	return n
}

// String shows the schedule and its window.
func (w Windowed) String() string {
	s := Text(w.S)
	if !w.Start.IsZero() {
		s += " from " + w.Start.UTC().Format(time.RFC3339)
	}
	if !w.End.IsZero() {
		s += " until " + w.End.UTC().Format(time.RFC3339)
	}
	return s
}

// Text is the schedule's String(), or its Go type.
func Text(s Schedule) string {
	if st, ok := s.(fmt.Stringer); ok {
		return st.String()
	}
	return fmt.Sprintf("%T", s)
}

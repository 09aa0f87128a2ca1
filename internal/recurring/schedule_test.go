package recurring

import (
	"testing"
	"time"
)

// TestJitterOffset: the offset is a whole number of milliseconds in
// [0, jitter), the same for a name every time, and spreads names.
func TestJitterOffset(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 100 {
		name := "tenant-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		off := JitterOffset(name, time.Hour)
		if off < 0 || off >= time.Hour || off%time.Millisecond != 0 {
			t.Fatalf("offset of %q = %v, want whole milliseconds in [0, 1h)", name, off)
		}
		if again := JitterOffset(name, time.Hour); again != off {
			t.Fatalf("offset of %q = %v, then %v", name, off, again)
		}
		seen[off] = true
	}
	if len(seen) < 90 {
		t.Fatalf("100 names got %d offsets, want them spread", len(seen))
	}
	if off := JitterOffset("a", time.Millisecond/2); off != 0 {
		t.Fatalf("offset under a millisecond = %v, want 0", off)
	}
}

// TestShapeJitter: every tick moves by the name's offset, and a step
// stores the shifted ticks.
func TestShapeJitter(t *testing.T) {
	off := JitterOffset("report", 30*time.Second)
	s := Shape("report", every(time.Minute), 30*time.Second, time.Time{}, time.Time{})
	now := m(0).Add(off).Add(time.Millisecond) // just after the tick of minute 0
	p := Step(state(nil), now, params(func(p *Params) { p.Schedule = s }))
	want := []time.Time{m(1).Add(off), m(2).Add(off)}
	if len(p.Store) != 2 || !p.Store[0].Equal(want[0]) || !p.Store[1].Equal(want[1]) {
		t.Fatalf("stored %v, want %v (offset %v)", p.Store, want, off)
	}
	if got := s.(Shifted).String(); got != "recurring.every +"+off.String() {
		t.Fatalf("String() = %q", got)
	}
}

// TestShapeWindow: no tick before Start or after End, after the shift.
func TestShapeWindow(t *testing.T) {
	off := JitterOffset("w", 30*time.Second)
	s := Shape("w", every(time.Minute), 30*time.Second, m(2), m(4).Add(off))
	var got []time.Time
	for tk := s.Next(m(0)); !tk.IsZero(); tk = s.Next(tk) {
		got = append(got, tk)
	}
	want := []time.Time{m(2).Add(off), m(3).Add(off), m(4).Add(off)}
	if off == 0 {
		want = []time.Time{m(2), m(3), m(4)}
	}
	if len(got) != len(want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	}
}

package bus

import (
	"regexp"
	"testing"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUUIDv7FormatOrderAndUniqueness(t *testing.T) {
	t.Parallel()
	g := newIDGenerator()
	seen := make(map[string]bool, 100000)
	prev := ""
	for range 100000 {
		id := g.New()
		if !uuidV7.MatchString(id) {
			t.Fatalf("%q is not a UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("%q not after %q: IDs must be time-ordered", id, prev)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id], prev = true, id
	}
}

func BenchmarkUUIDv7(b *testing.B) {
	g := newIDGenerator()
	for b.Loop() {
		_ = g.New()
	}
}

package bustest

import "testing"

// storeCase is one case of a store suite.
type storeCase[S any] struct {
	name string
	fn   func(t *testing.T, s S)
}

// runStoreCases runs each case in parallel on a store of its own from
// newStore, then checks with after that the case left the store empty.
func runStoreCases[S any](t *testing.T, newStore func(*testing.T) S, cases []storeCase[S], after func(*testing.T, S)) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			c.fn(t, s)
			after(t, s)
		})
	}
}

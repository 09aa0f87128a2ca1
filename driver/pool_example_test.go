package driver_test

import (
	"context"
	"fmt"

	"github.com/postbus/bus/driver"
)

// A receive loop over a pool: fetch for the free slots, put what came,
// close at the end.
// Close waits for the handlings. With Concurrency 1 the messages are handled in the
// order they were fetched, however far the loop read ahead.
func ExampleNewPool() {
	queue := []string{"a", "b", "c", "d", "e"} // the broker's queue
	fetch := func(n int) []string {            // a broker call for up to n
		got := queue[:min(n, len(queue))]
		queue = queue[len(got):]
		return got
	}
	p, err := driver.NewPool(driver.PoolOptions[string]{
		Concurrency: 1,
		Prefetch:    3,
		Handle:      func(m string) { fmt.Println("handled", m) }, // and settled
		// Unstarted is nil: what was fetched is handled before Close
		// returns. A transport sets it to hand such messages back.
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for len(queue) > 0 {
		n := p.Acquire(ctx, p.Capacity())
		msgs := fetch(n)
		p.Release(n - len(msgs))
		for _, m := range msgs {
			p.Put(m)
		}
	}
	p.Close()
	// Output:
	// handled a
	// handled b
	// handled c
	// handled d
	// handled e
}

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

// A pool with keys whose settlement outlives the handler: a1 and a2 share
// a key, so a2 waits until a1 is settled, while b1 of another key runs in
// between on the one worker.
func ExamplePool_Settled() {
	handled := make(chan string, 3)
	p, err := driver.NewPool(driver.PoolOptions[string]{
		Concurrency:      1,
		Prefetch:         2,
		HoldUntilSettled: true, // a slot and a key are held until Settled
		Key:              func(m string) (string, bool) { return m[:1], true },
		Handle: func(m string) {
			fmt.Println("handled", m)
			handled <- m // the settlement goes on elsewhere (a batched ack)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	n := p.Acquire(context.Background(), 3)
	for _, m := range []string{"a1", "a2", "b1"}[:n] {
		p.Put(m)
	}
	a1, b1 := <-handled, <-handled
	fmt.Println("settled", a1)
	p.Settled(a1) // a2 may start
	a2 := <-handled
	p.Settled(b1)
	p.Settled(a2)
	p.Close()
	// Output:
	// handled a1
	// handled b1
	// settled a1
	// handled a2
}

package bustest_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus/bustest"
)

func TestSendConcurrentlyCallsEachIndexOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[int64]int{}
	err := bustest.SendConcurrently(8, 1000, func(i int64) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct indexes, want 1000", len(seen))
	}
	for i, n := range seen {
		if i < 0 || i >= 1000 || n != 1 {
			t.Fatalf("index %d called %d times", i, n)
		}
	}
}

func TestSendConcurrentlyStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	var mu sync.Mutex
	calls := 0
	err := bustest.SendConcurrently(4, 1_000_000, func(i int64) error {
		mu.Lock()
		calls++
		mu.Unlock()
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if calls > 10_000 {
		t.Fatalf("%d calls after the error; the senders did not stop", calls)
	}
}

func TestCountdownWaitsForEveryMessage(t *testing.T) {
	c := bustest.NewCountdown(3)
	c.Done()
	c.Done()
	if err := c.Wait(10 * time.Millisecond); err == nil {
		t.Fatal("Wait returned nil with 2 of 3 handled")
	}
	go c.Done()
	if err := c.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Done() // a duplicate must not panic on the closed channel
	if got := c.Handled(); got != 4 {
		t.Fatalf("Handled() = %d, want 4", got)
	}
}

// A driver benchmark's send side: 8 goroutines send 100 messages between
// them, each waiting for its own send; the handler side counts them.
func ExampleSendConcurrently() {
	handled := bustest.NewCountdown(100)
	err := bustest.SendConcurrently(8, 100, func(i int64) error {
		handled.Done() // a transport's Send here; its handler calls Done
		return nil
	})
	fmt.Println(err, handled.Wait(time.Second), handled.Handled())
	// Output: <nil> <nil> 100
}

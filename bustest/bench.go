package bustest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// BenchStoreFactory returns a new, empty, isolated store for one benchmark.
type BenchStoreFactory func(b *testing.B) bus.ScheduledStore

// BenchmarkScheduledStore measures a store the way the dispatcher uses it:
// "Store" inserts rows in batches of 100; "ClaimDelete" claims due rows in
// batches of 100 and deletes them. Run it from a driver's benchmarks:
//
//	func BenchmarkConformance(b *testing.B) {
//		bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore { … })
//	}
func BenchmarkScheduledStore(b *testing.B, newStore BenchStoreFactory) {
	const batch = 100
	b.Run("Store", func(b *testing.B) { benchmarkStore(b, newStore(b), batch) })
	b.Run("ClaimDelete", func(b *testing.B) {
		s := newStore(b)
		ctx := context.Background()
		past := time.Now().Add(-time.Second)
		n := 0
		for b.Loop() {
			b.StopTimer()
			if err := s.StoreOutgoing(ctx, rows(fmt.Sprintf("c%d", n), batch, func(int) time.Time { return past })); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			got, err := s.ClaimDueOutgoing(ctx, suiteTransport, time.Now(), batch, time.Minute)
			if err != nil || len(got) != batch {
				b.Fatalf("claimed %d rows, err %v; want %d", len(got), err, batch)
			}
			if _, err := s.DeleteOutgoing(ctx, claims(got)); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "rows/s")
	})
}

// SendConcurrently calls send(i) for every i in [0, n) from `senders`
// goroutines, each goroutine starting its next call only after the last one
// returned: the shape of concurrent senders that each wait for their
// message to be accepted. It returns once every call has returned, with the
// first error; after an error the goroutines stop taking new work.
// Driver benchmarks use it for their send side.
func SendConcurrently(senders int, n int64, send func(i int64) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range max(senders, 1) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n && !failed.Load(); i = next.Add(1) - 1 {
				if err := send(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Countdown counts a benchmark's handled messages: the handler calls Done
// once per message, and Wait blocks until n were handled.
type Countdown struct {
	n    int64
	done atomic.Int64
	all  chan struct{}
}

// NewCountdown returns a Countdown waiting for n messages.
func NewCountdown(n int64) *Countdown {
	c := &Countdown{n: n, all: make(chan struct{})}
	if n <= 0 {
		close(c.all)
	}
	return c
}

// Done counts one handled message. Calls beyond n (duplicates) are counted
// but change nothing else.
func (c *Countdown) Done() {
	if c.done.Add(1) == c.n {
		close(c.all)
	}
}

// Handled returns how many messages were counted so far.
func (c *Countdown) Handled() int64 { return c.done.Load() }

// All returns a channel closed once n messages were counted.
func (c *Countdown) All() <-chan struct{} { return c.all }

// Wait blocks until n messages were counted, or returns an error saying how
// many were after timeout.
func (c *Countdown) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.all:
		return nil
	case <-t.C:
		return fmt.Errorf("handled %d of %d messages in %v", c.Handled(), c.n, timeout)
	}
}

// MeasureThroughput is the timed part of a send→handler benchmark: it
// resets the timer, sends handled's n messages with SendConcurrently,
// waits up to two minutes for the handler to count them all, reports
// msgs/s (from the first send to the last message handled) and stops the
// timer.
func MeasureThroughput(b *testing.B, senders int, handled *Countdown, send func(i int64) error) {
	b.Helper()
	b.ResetTimer()
	start := time.Now()
	if err := SendConcurrently(senders, handled.n, send); err != nil {
		b.Fatal(err)
	}
	ReportThroughput(b, start, handled)
}

// ReportThroughput ends the timed part of a send→handler benchmark whose
// sends are done: it waits up to two minutes for the handler to count
// handled's n messages, stops the timer and reports msgs/s since start.
func ReportThroughput(b *testing.B, start time.Time, handled *Countdown) {
	b.Helper()
	if err := handled.Wait(2 * time.Minute); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(handled.n)/elapsed.Seconds(), "msgs/s")
}

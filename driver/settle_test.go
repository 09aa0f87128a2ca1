package driver_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus/driver"
)

func newBatcher[T any](t *testing.T, o driver.BatcherOptions[T]) *driver.Batcher[T] {
	t.Helper()
	b, err := driver.NewBatcher(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatcherFlushesEveryItemOnceInOrderWithinMax(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got [][]int
	b := newBatcher(t, driver.BatcherOptions[int]{Max: 10, Linger: time.Millisecond, Flush: func(batch []int) {
		mu.Lock()
		got = append(got, batch)
		mu.Unlock()
	}})
	for i := range 1000 {
		b.Add(i)
	}
	b.Close()
	var all []int
	for _, batch := range got {
		if len(batch) == 0 || len(batch) > 10 {
			t.Fatalf("batch of %d items, want 1..10", len(batch))
		}
		all = append(all, batch...)
	}
	if !slices.Equal(all, seq(1000)) {
		t.Fatalf("flushed %d items, not each of 1000 once in order", len(all))
	}
	if len(got) > 500 {
		t.Fatalf("%d flushes for 1000 items added at once: not batched", len(got))
	}
}

func TestBatcherCloseFlushesAnItemStillLingering(t *testing.T) {
	t.Parallel()
	flushed := make(chan []int, 1)
	b := newBatcher(t, driver.BatcherOptions[int]{Max: 10, Linger: time.Hour, Flush: func(batch []int) { flushed <- batch }})
	b.Add(7)
	b.Close()
	select {
	case batch := <-flushed:
		if !slices.Equal(batch, []int{7}) {
			t.Fatalf("flushed %v, want [7]", batch)
		}
	default:
		t.Fatal("Close returned before the pending item was flushed")
	}
	b.Close()
}

func TestBatcherBoundsParallelFlushes(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int32
	gate := make(chan struct{})
	b := newBatcher(t, driver.BatcherOptions[int]{Max: 1, Parallel: 2, Flush: func([]int) {
		n := running.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		<-gate
		running.Add(-1)
	}})
	done := make(chan struct{})
	go func() {
		for i := range 6 {
			b.Add(i)
		}
		close(done)
	}()
	deadline := time.After(waitLimit)
	for running.Load() < 2 {
		select {
		case <-deadline:
			t.Fatal("two flushes never ran at once")
		case <-time.After(time.Millisecond):
		}
	}
	close(gate)
	<-done
	b.Close()
	if got := peak.Load(); got != 2 {
		t.Fatalf("peak flushes in flight = %d, want 2", got)
	}
}

func TestNewBatcherRefusesNoFlush(t *testing.T) {
	t.Parallel()
	if _, err := driver.NewBatcher(driver.BatcherOptions[int]{}); !errors.Is(err, driver.ErrNoFlush) {
		t.Fatalf("err = %v, want ErrNoFlush", err)
	}
}

func TestRetryRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	tries := 0
	err := driver.Retry(context.Background(), time.Now().Add(waitLimit), time.Millisecond, func(context.Context) error {
		tries++
		if tries < 3 {
			return errors.New("connection reset")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("Retry = %v after %d tries, want nil after 3", err, tries)
	}
}

func TestRetryGivesUpAtItsBound(t *testing.T) {
	t.Parallel()
	cut := errors.New("connection reset")
	tries := 0
	err := driver.Retry(context.Background(), time.Now(), time.Millisecond, func(context.Context) error {
		tries++
		return cut
	})
	if !errors.Is(err, cut) || tries != 1 {
		t.Fatalf("Retry = %v after %d tries, want the try's error after 1", err, tries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = driver.Retry(ctx, time.Now().Add(time.Hour), time.Millisecond, func(context.Context) error { return cut })
	if !errors.Is(err, cut) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Retry on an ended ctx = %v, want the try's error and context.Canceled", err)
	}
}

func TestOrderedAdvancesOverTheContiguousSettledPrefix(t *testing.T) {
	t.Parallel()
	var o driver.Ordered[int64]
	ps := make([]*driver.Position[int64], 5)
	for i := range ps {
		ps[i] = o.Add(int64(10 + i))
	}
	if _, ok := o.Settle(ps[2]); ok {
		t.Fatal("settling offset 12 before 10 advanced the prefix")
	}
	if _, ok := o.Settle(ps[1]); ok {
		t.Fatal("settling offset 11 before 10 advanced the prefix")
	}
	if last, ok := o.Settle(ps[0]); !ok || last != 12 {
		t.Fatalf("Settle(10) = %d, %v; want 12, true", last, ok)
	}
	if _, ok := o.Settle(ps[0]); ok {
		t.Fatal("settling 10 twice advanced the prefix")
	}
	if got := o.Unsettled(); !slices.Equal(got, []int64{13, 14}) || o.Len() != 2 {
		t.Fatalf("Unsettled = %v (Len %d), want [13 14]", got, o.Len())
	}
	if last, ok := o.Settle(ps[4]); ok {
		t.Fatalf("Settle(14) before 13 = %d, true", last)
	}
	if last, ok := o.Settle(ps[3]); !ok || last != 14 || o.Len() != 0 {
		t.Fatalf("Settle(13) = %d, %v with %d left; want 14, true, 0", last, ok, o.Len())
	}
}

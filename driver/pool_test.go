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

// waitLimit bounds waits for something that happens at once on an idle
// machine; generous for a loaded one.
const waitLimit = 30 * time.Second

func newPool[M any](t *testing.T, o driver.PoolOptions[M]) *driver.Pool[M] {
	t.Helper()
	p, err := driver.NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// feed puts msgs the way a receive loop does: acquire up to batch slots,
// "fetch" that many, put them.
func feed(t *testing.T, p *driver.Pool[int], msgs []int, batch int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for len(msgs) > 0 {
		n := p.Acquire(ctx, batch)
		if n == 0 {
			t.Fatal("Acquire: no slot within the wait limit")
		}
		got := msgs[:min(n, len(msgs))]
		msgs = msgs[len(got):]
		p.Release(n - len(got))
		for _, m := range got {
			p.Put(m)
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestPoolWithConcurrencyOneHandlesInPutOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []int
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Prefetch: 16, Handle: func(m int) {
		// A handler that yields gives read-ahead messages every chance
		// to overtake: none may.
		for range m % 3 {
			time.Sleep(time.Microsecond)
		}
		mu.Lock()
		order = append(order, m)
		mu.Unlock()
	}})
	want := seq(500)
	feed(t, p, want, 7)
	p.Close()
	if !slices.Equal(order, want) {
		t.Fatalf("handled out of order: %v", order)
	}
}

func TestPoolStartsInPutOrderWithManyWorkers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var starts []int
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 4, Prefetch: 4, Handle: func(m int) {
		mu.Lock()
		starts = append(starts, m)
		mu.Unlock()
	}})
	want := seq(300)
	feed(t, p, want, 3)
	p.Close()
	slices.Sort(starts)
	if !slices.Equal(starts, want) {
		t.Fatalf("handled %d messages, want each of %d once", len(starts), len(want))
	}
}

func TestPoolBoundsHandlingsAndHeldMessages(t *testing.T) {
	t.Parallel()
	const conc, prefetch = 3, 2
	gate := make(chan struct{})
	var running, peak atomic.Int32
	started := make(chan int, 100)
	p := newPool(t, driver.PoolOptions[int]{Concurrency: conc, Prefetch: prefetch, Handle: func(m int) {
		n := running.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		started <- m
		<-gate
		running.Add(-1)
	}})
	if got := p.Capacity(); got != conc+prefetch {
		t.Fatalf("Capacity = %d, want %d", got, conc+prefetch)
	}
	if n := p.TryAcquire(100); n != conc+prefetch {
		t.Fatalf("TryAcquire on an empty pool took %d slots, want %d", n, conc+prefetch)
	}
	for i := range conc + prefetch {
		p.Put(i)
	}
	for range conc {
		<-started
	}
	if n := p.TryAcquire(1); n != 0 {
		t.Fatalf("TryAcquire with every slot held took %d", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n := p.Acquire(ctx, 1); n != 0 {
		t.Fatalf("Acquire with every slot held took %d", n)
	}
	select {
	case m := <-started:
		t.Fatalf("message %d started beyond Concurrency", m)
	default:
	}
	close(gate)
	// Room comes back as handlings end.
	ctx2, cancel2 := context.WithTimeout(context.Background(), waitLimit)
	defer cancel2()
	if n := p.Acquire(ctx2, 100); n < 1 {
		t.Fatal("no slot came back after the handlings ended")
	} else {
		p.Release(n)
	}
	p.Close()
	if got := peak.Load(); got != conc {
		t.Fatalf("peak handlings = %d, want %d", got, conc)
	}
}

func TestPoolCloseHandsBackUnstartedAndWaitsForRunning(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	started := make(chan int, 10)
	var mu sync.Mutex
	var handled, back []int
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Prefetch: 3,
		Handle: func(m int) {
			started <- m
			<-gate
			mu.Lock()
			handled = append(handled, m)
			mu.Unlock()
		},
		Unstarted: func(m int) {
			mu.Lock()
			back = append(back, m)
			mu.Unlock()
		}})
	feed(t, p, []int{1, 2, 3, 4}, 4)
	if m := <-started; m != 1 {
		t.Fatalf("first started = %d, want 1", m)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	// The unstarted messages go back while message 1 is still running.
	deadline := time.After(waitLimit)
	for {
		mu.Lock()
		n := len(back)
		mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("unstarted messages not handed back while a handler ran: %v", back)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a handler was running")
	default:
	}
	close(gate)
	<-closed
	if !slices.Equal(handled, []int{1}) || !slices.Equal(back, []int{2, 3, 4}) {
		t.Fatalf("handled %v, handed back %v; want [1] and [2 3 4]", handled, back)
	}
	p.Close() // a second Close does nothing
}

func TestPoolCloseWithoutUnstartedHandlesEverything(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 2, Prefetch: 8, Handle: func(int) { n.Add(1) }})
	feed(t, p, seq(10), 10)
	p.Close()
	if got := n.Load(); got != 10 {
		t.Fatalf("handled %d of 10 put before Close", got)
	}
}

func TestPoolAcquireEndsWithCtx(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Handle: func(int) { <-gate }})
	defer p.Close()
	defer close(gate)
	ctx, cancel := context.WithCancel(context.Background())
	if n := p.Acquire(ctx, 1); n != 1 {
		t.Fatalf("Acquire = %d, want 1", n)
	}
	p.Put(0)
	got := make(chan int)
	go func() { got <- p.Acquire(ctx, 1) }()
	cancel()
	select {
	case n := <-got:
		if n != 0 {
			t.Fatalf("Acquire after ctx ended = %d, want 0", n)
		}
	case <-time.After(waitLimit):
		t.Fatal("Acquire did not return when ctx ended")
	}
	if n := p.Acquire(ctx, 1); n != 0 {
		t.Fatalf("Acquire on an ended ctx = %d, want 0", n)
	}
}

func TestNewPoolRefusesNoHandle(t *testing.T) {
	t.Parallel()
	if _, err := driver.NewPool(driver.PoolOptions[int]{}); !errors.Is(err, driver.ErrNoHandle) {
		t.Fatalf("err = %v, want ErrNoHandle", err)
	}
}

// A handling whose handler fails settles the other way (a nack), and one
// whose settlement fails reports it; neither holds a slot afterwards.
func TestPoolSettlementErrorsFreeTheirSlots(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var acked, nacked, failed []int
	settle := func(m int, ok bool) error {
		if m%5 == 0 {
			return errors.New("broker gone")
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			acked = append(acked, m)
		} else {
			nacked = append(nacked, m)
		}
		return nil
	}
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 2, Handle: func(m int) {
		herr := error(nil)
		if m%2 == 1 {
			herr = errors.New("handler failed")
		}
		if err := settle(m, herr == nil); err != nil {
			mu.Lock()
			failed = append(failed, m)
			mu.Unlock()
		}
	}})
	feed(t, p, seq(20), 2)
	p.Close()
	if len(acked)+len(nacked)+len(failed) != 20 || len(failed) != 4 || len(nacked) != 8 {
		t.Fatalf("acked %v, nacked %v, failed %v", acked, nacked, failed)
	}
	if n := p.TryAcquire(100); n != p.Capacity() {
		t.Fatalf("after Close %d slots free, want %d", n, p.Capacity())
	}
}

package driver_test

import (
	"context"
	"errors"
	"fmt"
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

// recv waits for a value on ch, failing the test after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing within the wait limit", what)
		panic("unreachable")
	}
}

// none fails the test when ch yields a value within a short while.
func none[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v", what, v)
	case <-time.After(50 * time.Millisecond):
	}
}

// With HoldUntilSettled a message's worker is free when Handle returns,
// its slot only when Settled is called: the read-ahead bounds the
// messages not settled yet.
func TestPoolHoldUntilSettledKeepsTheSlotAndFreesTheWorker(t *testing.T) {
	t.Parallel()
	handled := make(chan int, 10)
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Prefetch: 1, HoldUntilSettled: true,
		Handle: func(m int) { handled <- m }})
	defer p.Close()
	if n := p.TryAcquire(2); n != 2 {
		t.Fatalf("TryAcquire = %d, want 2", n)
	}
	p.Put(1)
	p.Put(2)
	// One worker handles both: the first's Handle returned, unsettled.
	if a, b := recv(t, handled, "first"), recv(t, handled, "second"); a != 1 || b != 2 {
		t.Fatalf("handled %d, %d; want 1, 2", a, b)
	}
	if n := p.TryAcquire(1); n != 0 {
		t.Fatalf("TryAcquire with two messages unsettled took %d", n)
	}
	p.Settled(1)
	if n := p.TryAcquire(2); n != 1 {
		t.Fatalf("TryAcquire after one Settled took %d, want 1", n)
	}
	p.Release(1)
}

// Messages of one key start one at a time in Put order; other keys and
// unkeyed messages run beside them.
func TestPoolKeyStartsOneAtATimeInPutOrder(t *testing.T) {
	t.Parallel()
	key := func(m int) (string, bool) { return fmt.Sprint(m % 3), m%3 != 0 }
	var mu sync.Mutex
	running := map[string]bool{}
	starts := map[string][]int{}
	var overlap []int
	var count int
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 4, Prefetch: 12, Key: key, Handle: func(m int) {
		k, keyed := key(m)
		mu.Lock()
		if keyed && running[k] {
			overlap = append(overlap, m)
		}
		running[k] = keyed
		starts[k] = append(starts[k], m)
		count++
		mu.Unlock()
		time.Sleep(time.Duration(m%4) * 100 * time.Microsecond)
		mu.Lock()
		running[k] = false
		mu.Unlock()
	}})
	feed(t, p, seq(300), 5)
	p.Close()
	if len(overlap) > 0 || count != 300 {
		t.Fatalf("handled %d of 300; started while their key ran: %v", count, overlap)
	}
	for _, k := range []string{"1", "2"} {
		if !slices.IsSorted(starts[k]) || len(starts[k]) != 100 {
			t.Fatalf("key %s started %v, want its 100 messages in Put order", k, starts[k])
		}
	}
}

// A message waiting for its key holds no worker and holds up no other
// message; the next of the key starts when the running one's Handle
// returns, or, with HoldUntilSettled, when it is Settled.
func TestPoolKeyedMessageWaitsWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			t.Parallel()
			gate := make(chan struct{})
			started := make(chan string, 10)
			p := newPool(t, driver.PoolOptions[string]{Concurrency: 2, Prefetch: 4, HoldUntilSettled: hold,
				Key: func(m string) (string, bool) { return m[:1], m[:1] != "-" },
				Handle: func(m string) {
					started <- m
					if m == "a1" {
						<-gate
					}
				}})
			defer p.Close()
			var open sync.Once
			defer open.Do(func() { close(gate) }) // a failed test does not leave a1 blocked
			if n := p.TryAcquire(5); n != 5 {
				t.Fatalf("TryAcquire = %d, want 5", n)
			}
			for _, m := range []string{"a1", "a2", "a3", "b1", "-1"} {
				p.Put(m)
			}
			got := []string{recv(t, started, "a1"), recv(t, started, "b1"), recv(t, started, "-1")}
			if slices.Sort(got); !slices.Equal(got, []string{"-1", "a1", "b1"}) {
				t.Fatalf("started %v, want a1, b1, -1 while a1 runs", got)
			}
			none(t, started, "started while a1 runs")
			open.Do(func() { close(gate) })
			if hold {
				none(t, started, "started before a1 was settled")
				p.Settled("a1")
			}
			if m := recv(t, started, "a2"); m != "a2" {
				t.Fatalf("started %s, want a2", m)
			}
			if hold {
				none(t, started, "started before a2 was settled")
				p.Settled("a2")
			}
			if m := recv(t, started, "a3"); m != "a3" {
				t.Fatalf("started %s, want a3", m)
			}
			if hold {
				for _, m := range []string{"a3", "b1", "-1"} {
					p.Settled(m)
				}
			}
		})
	}
}

// Drop takes queued messages out before they start and frees their slots.
func TestPoolDropTakesQueuedMessagesOut(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var mu sync.Mutex
	var handled []int
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Prefetch: 5, Handle: func(m int) {
		if m == 0 {
			<-gate
		}
		mu.Lock()
		handled = append(handled, m)
		mu.Unlock()
	}})
	feed(t, p, seq(6), 6)
	dropped := p.Drop(func(m int) bool { return m%2 == 1 })
	if !slices.Equal(dropped, []int{1, 3, 5}) {
		t.Fatalf("Drop returned %v, want [1 3 5]", dropped)
	}
	if n := p.TryAcquire(10); n != 3 {
		t.Fatalf("TryAcquire after Drop took %d, want the 3 dropped slots", n)
	}
	p.Release(3)
	close(gate)
	p.Close()
	if !slices.Equal(handled, []int{0, 2, 4}) {
		t.Fatalf("handled %v, want [0 2 4]", handled)
	}
}

// AcquireBatch waits for a batch of free slots while the workers are busy,
// and returns what is free as soon as a worker has nothing to start.
func TestPoolAcquireBatchWaitsForABatchOrAnIdleWorker(t *testing.T) {
	t.Parallel()
	gates := map[int]chan struct{}{}
	for i := range 4 {
		gates[i] = make(chan struct{})
	}
	started := make(chan int, 10)
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 2, Prefetch: 2, HoldUntilSettled: true,
		Handle: func(m int) { started <- m; <-gates[m] }})
	defer p.Close()
	feed(t, p, seq(4), 4)
	recv(t, started, "first")
	recv(t, started, "second")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	got := make(chan int, 1)
	go func() { got <- p.AcquireBatch(ctx, 2, 4) }()
	// A handling ends and is settled: one slot free, its worker takes the
	// next message. No batch yet, no idle worker.
	close(gates[0])
	p.Settled(0)
	recv(t, started, "third")
	none(t, got, "AcquireBatch with one slot free and the workers busy")
	close(gates[1])
	p.Settled(1)
	if n := recv(t, got, "AcquireBatch"); n != 2 {
		t.Fatalf("AcquireBatch = %d, want 2", n)
	}
	recv(t, started, "fourth")
	// Both handlings return unsettled: the workers are idle, nothing is
	// queued, and one slot is free: a batch of three is not waited for.
	p.Release(1)
	close(gates[2])
	close(gates[3])
	if n := p.AcquireBatch(ctx, 3, 4); n != 1 {
		t.Fatalf("AcquireBatch with idle workers = %d, want the 1 free slot", n)
	}
	p.Release(1)
	p.Settled(2)
	p.Settled(3)
}

// Queued counts the messages not started; Changed is closed when a
// Handle returns or a slot frees.
func TestPoolQueuedAndChanged(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	started := make(chan int, 3)
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 1, Prefetch: 2, Handle: func(m int) { started <- m; <-gate }})
	defer p.Close()
	feed(t, p, seq(3), 3)
	recv(t, started, "first")
	if n := p.Queued(); n != 2 {
		t.Fatalf("Queued = %d, want 2", n)
	}
	changed := p.Changed()
	none(t, changed, "Changed while every handling runs")
	gate <- struct{}{}
	recv(t, changed, "Changed after a Handle returned")
	recv(t, started, "second")
	if n := p.Queued(); n != 1 {
		t.Fatalf("Queued = %d, want 1", n)
	}
	close(gate)
}

// Two loops share a pool's slots (a reader of new messages and a taker of
// idle ones): a loop that gives its slots back and asks again at once
// must not take them before the loop that was already waiting, or the
// waiting one starves.
func TestPoolAcquireServesWaitersInTurn(t *testing.T) {
	t.Parallel()
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 2, Handle: func(int) {}})
	defer p.Close()
	ctx := context.Background()
	if n := p.Acquire(ctx, p.Capacity()); n != p.Capacity() {
		t.Fatalf("Acquire = %d, want every slot", n)
	}
	waiter := make(chan int, 1)
	go func() { waiter <- p.Acquire(ctx, 1) }()
	time.Sleep(50 * time.Millisecond) // the waiter is in line
	for range 100 {
		p.Release(p.Capacity())
		n := p.Acquire(ctx, p.Capacity()) // the busy loop asks again at once
		select {
		case got := <-waiter:
			if got != 1 {
				t.Fatalf("the waiter got %d slots, want 1", got)
			}
			return
		default:
		}
		p.Release(n)
		if n := p.Acquire(ctx, p.Capacity()); n == 0 {
			t.Fatal("Acquire returned 0")
		}
	}
	t.Fatal("the waiting Acquire never got a slot: the loop that released took them back each time")
}

// A loop that puts a message and at once asks for a batch must get the
// free slots when a worker takes that message and another worker stays
// idle with nothing to start: one slow handling must not keep the idle
// worker waiting for a batch that only its end would bring. The loop's
// AcquireBatch looks at the pool before the woken worker takes the
// message, as it does when the loop runs on.
func TestPoolAcquireBatchWakesWhenAWorkerTakesTheLastMessage(t *testing.T) {
	t.Parallel()
	const rounds = 5
	gates := make([]chan struct{}, rounds+1)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	started := make(chan int, rounds+1)
	p := newPool(t, driver.PoolOptions[int]{Concurrency: 3, Prefetch: 3,
		Handle: func(m int) { started <- m; <-gates[m] }})
	opened := 1 // gates[1:opened] are open
	defer func() {
		for _, g := range slices.Concat(gates[:1], gates[opened:]) {
			close(g)
		}
		p.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	feed(t, p, []int{0}, 1) // the slow handling, on one worker throughout
	recv(t, started, "the slow handling")
	for m := 1; m <= rounds; m++ {
		if n := p.Acquire(ctx, 1); n != 1 {
			t.Fatalf("Acquire = %d, want 1", n)
		}
		got := make(chan int, 1)
		go func() {
			p.Put(m)
			got <- p.AcquireBatch(ctx, p.Capacity(), p.Capacity())
		}()
		if s := recv(t, started, "the message put"); s != m {
			t.Fatalf("started %d, want %d", s, m)
		}
		// Two handlings run, one worker is idle, four slots are free.
		if n := recv(t, got, fmt.Sprintf("round %d: AcquireBatch with a worker idle", m)); n != p.Capacity()-2 {
			t.Fatalf("round %d: AcquireBatch = %d, want the %d free slots", m, n, p.Capacity()-2)
		}
		p.Release(p.Capacity() - 2)
		close(gates[m])
		opened++
	}
}

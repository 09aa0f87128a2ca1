package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

func TestDelayedRetriesThenErrorQueue(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	var seen []string
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{
		Immediate: 1, Delayed: 2, DelayedBackoff: func(n int) time.Duration { return time.Duration(n) * 50 * time.Millisecond },
	}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m OrderPlaced) error {
			imm, del := bus.Attempt(ctx)
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%d/%d", imm, del))
			mu.Unlock()
			return errors.New("down")
		})
	})
	if err := b.Publish(ctxT(t), OrderPlaced{ID: "1"}); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "error", 1)
	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	if want := "1/0 2/0 1/1 2/1 1/2 2/2"; got != want {
		t.Errorf("attempts = %q, want %q", got, want)
	}
	if m := b.Metrics(); m.MovedToError != 1 || m.Retried != 5 {
		t.Errorf("metrics %+v", m)
	}
}

func TestRetryAfterAndPolicy(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	errRateLimited := errors.New("429")
	var calls atomic.Int64
	var times []time.Time
	var mu sync.Mutex
	done := make(chan struct{})
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{
		Policy: func(_ *bus.Envelope, err error) error {
			if errors.Is(err, errRateLimited) {
				return bus.RetryAfter(err, 300*time.Millisecond)
			}
			return bus.Unrecoverable(err)
		},
	}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			switch calls.Add(1) {
			case 1:
				return errRateLimited
			case 2:
				close(done)
				return nil
			}
			return nil
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("message not retried")
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := times[1].Sub(times[0]); gap < 300*time.Millisecond {
		t.Errorf("retried after %v, want at least 300ms", gap)
	}
}

func TestPolicyUnrecoverable(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var calls atomic.Int64
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{
		Policy: func(_ *bus.Envelope, err error) error { return bus.Unrecoverable(err) },
	}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { calls.Add(1); return errors.New("bad input") })
	})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "error", 1)
	if calls.Load() != 1 {
		t.Errorf("handler called %d times, want 1", calls.Load())
	}
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var calls atomic.Int64
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, HandlerTimeout: 50 * time.Millisecond,
		Retries: bus.RetryConfig{Immediate: 1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			calls.Add(1)
			<-release // hangs, ignoring its ctx
			return nil
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "error", 1)
	if calls.Load() != 2 {
		t.Errorf("handler called %d times, want 2", calls.Load())
	}
}

// rejecting wraps a real transport and refuses messages it is told to, for
// fault injection.
type rejecting struct {
	bus.Transport
	reject func(queue string, env *bus.Envelope) bool
	count  atomic.Int64
}

func (r *rejecting) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if r.reject(queue, env) {
		r.count.Add(1)
		return errors.New("rejected by fault injection")
	}
	return r.Transport.Send(ctx, queue, env)
}

func TestDispatchRetriesThenErrorQueueOthersFlow(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	tr := &rejecting{Transport: mem, reject: func(q string, e *bus.Envelope) bool { return q == "sales" && e.ID == "bad" }}
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Dispatcher: bus.DispatcherConfig{
		NumberOfRetries: 3, RetryBackoff: 20 * time.Millisecond, MaximumRecoveryFailuresPerSecond: 1000,
	}}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	for i := range 20 {
		id := fmt.Sprint(i)
		if i == 7 {
			id = "bad"
		}
		if err := b.Send(ctxT(t), PlaceOrder{ID: id}, bus.To("sales"), bus.WithMessageID(id), bus.DeliverAfter(20*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	in.WaitFor(t, 19)
	waitLen(t, mem, "error", 1)
	if n := tr.count.Load(); n != 4 {
		t.Errorf("transport rejected %d hand-overs, want 4 (1 + 3 retries)", n)
	}
	if m := b.Metrics(); m.DispatchFails != 3 || m.MovedToError != 1 {
		t.Errorf("metrics %+v", m)
	}
}

// failingStore is a memory store whose operations fail while down is set.
type failingStore struct {
	*bus.MemoryPersistence
	down atomic.Bool
}

var errStoreDown = errors.New("store down")

func (f *failingStore) StoreOutgoing(ctx context.Context, m []bus.OutgoingMessage) error {
	if f.down.Load() {
		return errStoreDown
	}
	return f.MemoryPersistence.StoreOutgoing(ctx, m)
}

func (f *failingStore) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	if f.down.Load() {
		return nil, errStoreDown
	}
	return f.MemoryPersistence.ClaimDueOutgoing(ctx, transport, now, limit, lease)
}

func (f *failingStore) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	if f.down.Load() {
		return bus.AheadClaim{}, errStoreDown
	}
	return f.MemoryPersistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
}

func TestCircuitBreakersCallOnCriticalErrorAndRecover(t *testing.T) {
	t.Parallel()
	store := &failingStore{MemoryPersistence: bus.NewMemoryPersistence()}
	critical := make(chan *bus.CriticalError, 10)
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: store,
		CircuitBreakers: bus.CircuitBreakerConfig{Store: 100 * time.Millisecond, Fetch: 100 * time.Millisecond},
		OnCriticalError: func(err error) {
			var ce *bus.CriticalError
			if errors.As(err, &ce) {
				critical <- ce
			}
		},
	}, func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	if err := b.Send(ctxT(t), PlaceOrder{ID: "before"}, bus.To("sales"), bus.DeliverAfter(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	// A delayed send while the store is down fails: the caller can act.
	for range 3 {
		err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(time.Minute))
		if !errors.Is(err, errStoreDown) {
			t.Fatalf("delayed send with the store down = %v", err)
		}
		time.Sleep(60 * time.Millisecond)
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for !got["store"] || !got["fetch"] {
		select {
		case ce := <-critical:
			got[ce.Breaker] = true
		case <-deadline:
			t.Fatalf("breakers tripped: %v, want store and fetch", got)
		}
	}
	store.down.Store(false)
	in.WaitFor(t, 1) // the dispatcher probes, recovers and delivers what was due
	if in.Messages()[0].ID != "before" {
		t.Errorf("delivered %+v", in.Messages()[0])
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	f := bus.ExponentialBackoff(time.Second, 10*time.Second)
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		for range 100 {
			if got := f(n); got < want/2 || got > want {
				t.Fatalf("retry %d waited %v, want within [%v, %v]", n, got, want/2, want)
			}
		}
	}
}

// hanging wraps a transport whose sends to one queue block until their ctx
// ends while down is set: a driver waiting out a broker outage.
type hanging struct {
	bus.Transport
	queue string
	down  atomic.Bool
}

func (h *hanging) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if queue == h.queue && h.down.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Transport.Send(ctx, queue, env)
}

func TestDispatchHandOverIsBoundedDuringOutage(t *testing.T) {
	t.Parallel()
	mem := bus.NewMemoryTransport()
	tr := &hanging{Transport: mem, queue: "sales"}
	tr.down.Store(true)
	tripped := make(chan struct{}, 1)
	var handled sync.Map
	var dups atomic.Int64
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr,
		Dispatcher:      bus.DispatcherConfig{Lease: 3 * time.Second, RetryBackoff: 50 * time.Millisecond, MaximumRecoveryFailuresPerSecond: 100},
		CircuitBreakers: bus.CircuitBreakerConfig{Dispatch: 300 * time.Millisecond},
		OnCriticalError: func(err error) {
			var ce *bus.CriticalError
			if errors.As(err, &ce) && ce.Breaker == "dispatch" {
				select {
				case tripped <- struct{}{}:
				default:
				}
			}
		},
	}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			if _, loaded := handled.LoadOrStore(m.ID, true); loaded {
				dups.Add(1)
			}
			return nil
		})
	})
	const n = 50
	for i := range n {
		if err := b.Send(ctxT(t), PlaceOrder{ID: fmt.Sprint(i)}, bus.To("sales"), bus.DeliverAfter(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-tripped:
	case <-time.After(60 * time.Second):
		t.Fatal("dispatch breaker never tripped while every hand-over hung")
	}
	if b.Metrics().DispatchFails == 0 {
		t.Error("no dispatch failure counted during the outage")
	}
	tr.down.Store(false)
	drivertest.Eventually(t, 60*time.Second, func() bool { return count(&handled) >= n }, "%d messages handled", n)
	if got := count(&handled); got != n || dups.Load() != 0 {
		t.Errorf("handled %d of %d, %d duplicates", got, n, dups.Load())
	}
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestFailureAttemptsHeaderCountsEveryDelivery: the error queue's attempts
// header counts the handler's runs across immediate and delayed retries,
// not only those of the last delivery.
func TestFailureAttemptsHeaderCountsEveryDelivery(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var calls atomic.Int64
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{
		Immediate: 1, Delayed: 1, DelayedBackoff: func(int) time.Duration { return 10 * time.Millisecond },
	}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, PlaceOrder) error { calls.Add(1); return errors.New("down") })
	})
	sender := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr, SendOnly: true}, nil)
	if err := sender.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	failed := receiveOne(t, tr, "error")
	if calls.Load() != 4 {
		t.Fatalf("handler ran %d times, want 4 (2 deliveries of 2 attempts)", calls.Load())
	}
	if got := failed.Header(bus.HeaderFailureAttempts); got != "4" {
		t.Errorf("%s = %q, want \"4\"", bus.HeaderFailureAttempts, got)
	}
}

// receiveOne takes one message from queue of tr, failing after 10 s.
func receiveOne(t *testing.T, tr *bus.MemoryTransport, queue string) *bus.Envelope {
	t.Helper()
	got := make(chan *bus.Envelope, 1)
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	go func() {
		_ = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			select {
			case got <- env:
				cancel()
				return nil
			default:
				return errors.New("taken one already")
			}
		})
	}()
	select {
	case env := <-got:
		return env
	case <-ctx.Done():
		// The handler cancels ctx as it hands the message over, so both
		// cases can be ready at once: the message decides.
		select {
		case env := <-got:
			return env
		default:
		}
		t.Fatalf("nothing arrived in %s", queue)
		return nil
	}
}

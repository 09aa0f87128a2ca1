package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Job is the message of the batch tests: N numbers the jobs of a batch.
type Job struct{ N int }

// A batch of delayed, timed and immediate messages: every message is
// delivered once, and none before its due time, on a fake clock.
func TestSendBatchDeliversEachOnceNoneEarly(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := bustest.NewFakeClock(start)
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	var mu sync.Mutex
	seen := map[int]int{}
	early := 0
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", Transport: tr, Persistence: store, Clock: clock, Logger: quiet()},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(ctx context.Context, m Job) error {
				mu.Lock()
				defer mu.Unlock()
				if due := bus.IncomingMessage(ctx).DueAt; clock.Now().Before(due) {
					early++
				}
				seen[m.N]++
				return nil
			})
		})
	// Jobs 0..99 are immediate; the others are due in minute 1 to 10, half
	// with DeliverAfter, half with DeliverAt.
	const n = 1000
	dueMinute := func(i int) int { return i%10 + 1 }
	var batch bus.Batch
	for i := range n {
		switch {
		case i < 100:
			batch.Send(Job{N: i}, bus.To("jobs"))
		case i%2 == 0:
			batch.Send(Job{N: i}, bus.To("jobs"), bus.DeliverAfter(time.Duration(dueMinute(i))*time.Minute))
		default:
			batch.Send(Job{N: i}, bus.To("jobs"), bus.DeliverAt(start.Add(time.Duration(dueMinute(i))*time.Minute)))
		}
	}
	if err := b.SendBatch(ctxT(t), &batch); err != nil {
		t.Fatal(err)
	}
	if got := b.Metrics().Scheduled; got != n {
		t.Errorf("Metrics().Scheduled = %d, want %d (every message of the batch is stored)", got, n)
	}
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	waitDelivered := func(want int) {
		t.Helper()
		drivertest.Eventually(t, 30*time.Second, func() bool { return delivered() >= want }, "%d jobs to be delivered", want)
	}
	waitDelivered(100) // the immediate ones, without the clock moving
	dueBy := 100
	for minute := 1; minute <= 10; minute++ {
		// Walk to 1 ms before the minute, a second at a time, letting the
		// dispatcher look each time it wakes; then check nothing more came.
		for clock.Now().Before(start.Add(time.Duration(minute)*time.Minute - time.Second)) {
			clock.WaitForTimers(ctxT(t), 1)
			clock.Advance(time.Second)
		}
		clock.WaitForTimers(ctxT(t), 1)
		clock.Advance(time.Second - time.Millisecond)
		clock.WaitForTimers(ctxT(t), 1)
		if got := delivered(); got != dueBy {
			t.Fatalf("1 ms before minute %d: %d jobs delivered, want %d", minute, got, dueBy)
		}
		clock.Advance(time.Millisecond)
		dueBy += (n - 100) / 10
		waitDelivered(dueBy)
	}
	// The dispatcher deletes delivered rows after handing them over, in
	// batches: let it settle the last minute's rows before counting them.
	drivertest.Eventually(t, 30*time.Second, func() bool {
		if store.Len() == 0 {
			return true
		}
		if clock.WaitForTimers(ctxT(t), 1) {
			clock.Advance(20 * time.Millisecond)
		}
		return false
	}, "the delivered rows to be deleted")
	mu.Lock()
	defer mu.Unlock()
	if early != 0 {
		t.Errorf("%d jobs handled before their due time", early)
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("job %d delivered %d times, want once", i, seen[i])
		}
	}
	if store.Len() != 0 {
		t.Errorf("%d rows left in the store", store.Len())
	}
}

// A batch with one bad message is refused as a whole, naming the message:
// nothing is stored or sent.
func TestSendBatchRefusesABadMessageAndStoresNothing(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", Transport: tr, Persistence: store, SendOnly: true, Logger: quiet()},
		func(b *bus.Bus) { _ = bus.Route[PlaceOrder](b, "sales") })
	type unrouted struct{}
	for name, c := range map[string]struct {
		bad  func(bt *bus.Batch)
		want error
	}{
		"negative delay":    {func(bt *bus.Batch) { bt.Send(PlaceOrder{}, bus.DeliverAfter(-time.Second)) }, bus.ErrInvalidOption},
		"both delays":       {func(bt *bus.Batch) { bt.Send(PlaceOrder{}, bus.DeliverAfter(time.Second), bus.DeliverAt(time.Now())) }, bus.ErrConflictingDelivery},
		"no route":          {func(bt *bus.Batch) { bt.Send(unrouted{}) }, bus.ErrNoRoute},
		"nil message":       {func(bt *bus.Batch) { bt.Publish(nil) }, bus.ErrInvalidMessage},
		"event with To":     {func(bt *bus.Batch) { bt.Publish(OrderPlaced{}, bus.To("sales")) }, bus.ErrInvalidOption},
		"reserved header":   {func(bt *bus.Batch) { bt.Send(PlaceOrder{}, bus.WithHeader("postbus.x", "1")) }, bus.ErrInvalidOption},
		"unserializable fn": {func(bt *bus.Batch) { bt.Publish(func() {}) }, bus.ErrInvalidMessage},
	} {
		t.Run(name, func(t *testing.T) {
			var batch bus.Batch
			for i := range 50 {
				batch.Send(PlaceOrder{ID: fmt.Sprint(i)}, bus.DeliverAfter(time.Hour))
				batch.Publish(OrderPlaced{ID: fmt.Sprint(i)})
			}
			c.bad(&batch)
			batch.Send(PlaceOrder{ID: "after"})
			err := b.SendBatch(ctxT(t), &batch)
			var be *bus.BatchError
			if !errors.As(err, &be) || be.Index != 100 || !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want a *BatchError for message 100 wrapping %v", err, c.want)
			}
		})
	}
	if store.Len() != 0 || tr.Len("sales") != 0 {
		t.Errorf("stored %d, sent %d; want nothing", store.Len(), tr.Len("sales"))
	}
	if err := b.SendBatch(ctxT(t), nil); err != nil {
		t.Errorf("SendBatch(nil) = %v, want nil", err)
	}
}

// Outside a handler a batch needs a scheduled-message store, even when no
// message in it is delayed: its messages are stored as rows.
func TestSendBatchWithoutAStore(t *testing.T) {
	t.Parallel()
	var batch bus.Batch
	batch.Send(PlaceOrder{}, bus.To("sales"))
	plain := bustest.StartBus(t, bus.Config{Endpoint: "jobs", SendOnly: true, Persistence: plainPersistence{}, Logger: quiet()}, nil)
	if err := plain.SendBatch(ctxT(t), &batch); !errors.Is(err, bus.ErrDelayedDeliveryNotSupported) {
		t.Errorf("SendBatch without a scheduled store = %v, want ErrDelayedDeliveryNotSupported", err)
	}
}

// Sending a batch again keeps the rows already stored: by message ID.
func TestSendBatchIsIdempotentByMessageID(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", Persistence: store, SendOnly: true, Logger: quiet()}, nil)
	send := func(from, to int, after time.Duration) {
		t.Helper()
		var batch bus.Batch
		for i := from; i < to; i++ {
			batch.Send(Job{N: i}, bus.To("jobs"), bus.DeliverAfter(after), bus.WithMessageID(fmt.Sprintf("job-%d", i)))
		}
		if err := b.SendBatch(ctxT(t), &batch); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 500, time.Hour)
	send(400, 600, 2*time.Hour) // 100 already stored, 100 new
	if store.Len() != 600 {
		t.Fatalf("stored %d rows, want 600", store.Len())
	}
	row, ok, err := store.GetScheduled(ctxT(t), "job-450")
	if err != nil || !ok || row.DueAt.After(time.Now().Add(90*time.Minute)) {
		t.Errorf("job-450 = %v, %v, %v; want the first row, due in an hour", row.DueAt, ok, err)
	}
}

// In a handler, a batch's messages get the IDs the same sends one by one
// would get, and are released only when the handler succeeds.
func TestSendBatchInAHandlerMatchesSingleSends(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var attempts [][]string // outgoing IDs per attempt
	record := func(next bus.PipelineFunc) bus.PipelineFunc {
		return func(ctx context.Context, env *bus.Envelope) error {
			if _, ok := env.Headers["attempt"]; ok {
				mu.Lock()
				n := len(attempts) - 1
				attempts[n] = append(attempts[n], env.ID)
				mu.Unlock()
			}
			return next(ctx, env)
		}
	}
	jobs := bustest.NewRecorder[Job]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", Outgoing: []bus.Middleware{record}, Logger: quiet()}, func(b *bus.Bus) {
		_ = bus.Handle(b, jobs.Handler)
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			mu.Lock()
			attempts = append(attempts, nil)
			mu.Unlock()
			first, _ := bus.Attempt(ctx)
			if first == 1 { // one batch, then fail: nothing may be released
				var batch bus.Batch
				for i := range 3 {
					batch.Send(Job{N: i}, bus.To("jobs"), bus.WithHeader("attempt", "1"), bus.DeliverAfter(time.Duration(i)*10*time.Millisecond))
				}
				if err := b.SendBatch(ctx, &batch); err != nil {
					return bus.Unrecoverable(err)
				}
				return errors.New("fail after the batch")
			}
			for i := range 3 {
				if err := b.Send(ctx, Job{N: i}, bus.To("jobs"), bus.WithHeader("attempt", "2"), bus.DeliverAfter(time.Duration(i)*10*time.Millisecond)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err := b.Send(ctxT(t), PlaceOrder{ID: "1"}, bus.To("jobs")); err != nil {
		t.Fatal(err)
	}
	jobs.WaitFor(t, 3)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || len(attempts[0]) != 3 || !slices.Equal(attempts[0], attempts[1]) {
		t.Fatalf("outgoing IDs per attempt = %v, want the batch's three IDs again from the single sends", attempts)
	}
	if jobs.Len() != 3 {
		t.Errorf("delivered %d jobs, want 3 (the failed attempt's batch must not be released)", jobs.Len())
	}
	for _, env := range jobs.Envelopes() {
		if env.Header("attempt") != "2" {
			t.Errorf("job %s came from attempt %s, want 2", env.ID, env.Header("attempt"))
		}
	}
}

// Outgoing middleware runs once per message of a batch; an error from it
// refuses the batch, and a message it passes on after the batch went ahead
// gets ErrBatchReleased.
func TestSendBatchOutgoingMiddleware(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	late := make(chan error, 1)
	batchDone := make(chan struct{}) // closed once the batch with a late message went ahead
	mw := func(next bus.PipelineFunc) bus.PipelineFunc {
		return func(ctx context.Context, env *bus.Envelope) error {
			switch env.Header("mw") {
			case "fail":
				return errors.New("refused by middleware")
			case "drop":
				return nil
			case "late":
				go func() { <-batchDone; late <- next(ctx, env) }()
				return nil
			}
			env.SetHeader("seen", "yes")
			return next(ctx, env)
		}
	}
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", Persistence: store, SendOnly: true, Outgoing: []bus.Middleware{mw}, Logger: quiet()}, nil)
	var batch bus.Batch
	batch.Send(Job{N: 1}, bus.To("jobs"), bus.DeliverAfter(time.Hour))
	batch.Send(Job{N: 2}, bus.To("jobs"), bus.DeliverAfter(time.Hour), bus.WithHeader("mw", "fail"))
	var be *bus.BatchError
	if err := b.SendBatch(ctxT(t), &batch); !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("err = %v, want a *BatchError for message 1", err)
	}
	if store.Len() != 0 {
		t.Fatalf("stored %d rows after a refused batch, want 0", store.Len())
	}
	batch.Reset()
	batch.Send(Job{N: 1}, bus.To("jobs"), bus.DeliverAfter(time.Hour), bus.WithMessageID("kept"))
	batch.Send(Job{N: 2}, bus.To("jobs"), bus.DeliverAfter(time.Hour), bus.WithHeader("mw", "drop"))
	batch.Send(Job{N: 3}, bus.To("jobs"), bus.DeliverAfter(time.Hour), bus.WithHeader("mw", "late"))
	err := b.SendBatch(ctxT(t), &batch)
	close(batchDone)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-late; !errors.Is(err, bus.ErrBatchReleased) {
		t.Errorf("late next = %v, want ErrBatchReleased", err)
	}
	row, ok, _ := store.GetScheduled(ctxT(t), "kept")
	if store.Len() != 1 || !ok {
		t.Fatalf("stored %d rows, want only the kept one", store.Len())
	}
	if env, err := bus.UnmarshalEnvelope(row.Envelope); err != nil || env.Header("seen") != "yes" {
		t.Errorf("stored envelope %v, %v; want the middleware's header", env, err)
	}
}

// The observer sees one StartSend and EndSend per message of a batch.
func TestSendBatchObserved(t *testing.T) {
	t.Parallel()
	o := &recordingObserver{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "jobs", SendOnly: true, Observer: o, Logger: quiet()}, nil)
	var batch bus.Batch
	batch.Send(Job{N: 1}, bus.To("jobs"), bus.DeliverAfter(time.Hour))
	batch.Publish(OrderPlaced{}, bus.DeliverAfter(time.Hour))
	if err := b.SendBatch(ctxT(t), &batch); err != nil {
		t.Fatal(err)
	}
	calls, _, _ := o.snapshot()
	if !slices.Equal(calls, []string{"StartSend", "StartSend", "EndSend", "EndSend"}) {
		t.Errorf("observer calls = %v, want both StartSends, then both EndSends after the store", calls)
	}
}

// Messages are scheduled in bulk with one call; each has its own options.
func ExampleBus_SendBatch() {
	ctx := context.Background()
	b, _ := bus.New(bus.Config{Endpoint: "reminders", SendOnly: true, Logger: quiet()})
	_ = b.Start(ctx)
	defer b.Stop(ctx)

	var batch bus.Batch
	for i, in := range []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		batch.Send(PlaceOrder{ID: fmt.Sprint(i)}, bus.To("billing"), bus.DeliverAfter(in),
			bus.WithMessageID(fmt.Sprintf("reminder-%d", i)))
	}
	batch.Publish(OrderPlaced{ID: "all"}, bus.DeliverAfter(time.Hour))
	err := b.SendBatch(ctx, &batch)
	fmt.Println(batch.Len(), err)
	ok, _ := b.CancelScheduled(ctx, "reminder-2")
	fmt.Println("cancelled:", ok)
	// Output:
	// 4 <nil>
	// cancelled: true
}

// BenchmarkSendBatch schedules batches of 10,000 messages due in an hour
// into the in-memory store: the bus's own cost of a batch (options,
// envelopes, encoding, one store call).
func BenchmarkSendBatch(b *testing.B) {
	const size = 10_000
	store := bus.NewMemoryPersistence()
	bb := bustest.StartBus(b, bus.Config{Endpoint: "jobs", Persistence: store, SendOnly: true, Logger: quiet()}, nil)
	after := bus.DeliverAfter(time.Hour)
	to := bus.To("jobs")
	var batch bus.Batch
	for b.Loop() {
		batch.Reset()
		for i := range size {
			batch.Send(Job{N: i}, to, after)
		}
		if err := bb.SendBatch(b.Context(), &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkStoreOutgoingBulkMemory is the in-memory store's share of it.
func BenchmarkStoreOutgoingBulkMemory(b *testing.B) {
	bustest.BenchmarkStoreBulk(b, func(*testing.B) bus.ScheduledStore { return bus.NewMemoryPersistence() }, 10_000)
}

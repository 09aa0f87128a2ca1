package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

var errRefused = errors.New("refused by the fake broker")

// batchTransport is the in-memory transport with a SendBatch that settles
// each message on its own: a message with the header fail=yes, or every
// message while down is set, is refused; the others go to the memory
// transport. With gate set, each call hands the accepted messages over and
// then waits for a value on gate before it returns, like a broker that
// holds its confirms.
type batchTransport struct {
	*bus.MemoryTransport
	down atomic.Bool
	gate chan struct{}

	mu    sync.Mutex
	sizes []int // the size of each SendBatch call
	calls chan int
}

func newBatchTransport() *batchTransport {
	return &batchTransport{MemoryTransport: bus.NewMemoryTransport(), calls: make(chan int, 100)}
}

func (f *batchTransport) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(batch))
	f.mu.Unlock()
	errs := make([]error, len(batch))
	for i, m := range batch {
		switch {
		case f.down.Load() || m.Envelope.Header("fail") == "yes":
			errs[i] = errRefused
		case m.Publish:
			errs[i] = f.Publish(ctx, m.Envelope)
		default:
			errs[i] = f.Send(ctx, m.Queue, m.Envelope)
		}
	}
	f.calls <- len(batch)
	if f.gate != nil {
		<-f.gate
	}
	return errs
}

func (f *batchTransport) callSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sizes...)
}

// advanceUntil moves the fake clock a second at a time, each time the
// dispatcher sleeps, until cond holds.
func advanceUntil(t *testing.T, clock *bustest.FakeClock, what string, cond func() bool) {
	t.Helper()
	drivertest.Eventually(t, 30*time.Second, func() bool {
		if cond() {
			return true
		}
		if clock.WaitForTimers(ctxT(t), 1) {
			clock.Advance(time.Second)
		}
		return false
	}, "%s", what)
}

// scheduledRows returns the rows left in the store, by message ID.
func scheduledRows(t *testing.T, store *bus.MemoryPersistence) map[string]bus.OutgoingMessage {
	t.Helper()
	rows, err := store.ListScheduled(ctxT(t), bus.ScheduledQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bus.OutgoingMessage, len(rows))
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

// A transport with SendBatch gets a claimed batch in one call; no row is
// deleted while the call waits for its confirms; afterwards each row is
// settled by its own message's result: the accepted ones deleted, the
// refused ones kept with a failure recorded.
func TestPipelinedHandOverSettlesEachRowByItsOwnResult(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr, store := newBatchTransport(), bus.NewMemoryPersistence()
	tr.gate = make(chan struct{})
	obs := &recordingObserver{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock, Observer: obs,
		Dispatcher: bus.DispatcherConfig{RetryBackoff: time.Hour}}, nil)
	failing := map[string]bool{}
	for i := range 10 {
		opts := []bus.Option{bus.To("billing"), bus.DeliverAfter(time.Second)}
		if i%3 == 1 {
			opts = append(opts, bus.WithHeader("fail", "yes"), bus.WithMessageID("fail-"+string(rune('a'+i))))
			failing["fail-"+string(rune('a'+i))] = true
		}
		if err := b.Send(ctxT(t), PlaceOrder{ID: "x"}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	var size int
	advanceUntil(t, clock, "the batch hand-over", func() bool {
		select {
		case size = <-tr.calls:
			return true
		default:
			return false
		}
	})
	if size != 10 {
		t.Errorf("one call handed over %d rows, want the whole batch of 10", size)
	}
	// The broker has the accepted messages but has not confirmed them yet.
	if n := store.Len(); n != 10 {
		t.Errorf("%d rows stored while their confirms are pending, want all 10", n)
	}
	if starts, ends := countDispatch(obs); starts != 10 || ends != 0 {
		t.Errorf("while the confirms are pending: %d StartDispatch, %d EndDispatch; want 10 and 0", starts, ends)
	}
	close(tr.gate)
	// The accepted rows are deleted and the refused ones' failures recorded
	// by separate store calls: wait for both.
	settled := func() bool {
		if store.Len() != len(failing) {
			return false
		}
		for id := range failing {
			if r, ok := scheduledRows(t, store)[id]; !ok || r.Failures == 0 {
				return false
			}
		}
		return true
	}
	drivertest.Eventually(t, 30*time.Second, settled, "the refused rows to carry their failure")
	rows := scheduledRows(t, store)
	if len(rows) != len(failing) {
		t.Fatalf("%d rows left, want the %d refused ones", len(rows), len(failing))
	}
	for id := range failing {
		r, ok := rows[id]
		switch {
		case !ok:
			t.Errorf("refused row %s was deleted", id)
		case r.Failures != 1 || !strings.Contains(r.LastError, errRefused.Error()):
			t.Errorf("refused row %s: %d failures, last error %q; want 1 and the refusal", id, r.Failures, r.LastError)
		}
	}
	if n := tr.Len("billing"); n != 10-len(failing) {
		t.Errorf("%d messages in billing, want %d", n, 10-len(failing))
	}
	if starts, ends := countDispatch(obs); starts != 10 || ends != 10 {
		t.Errorf("%d StartDispatch, %d EndDispatch; want one of each per row", starts, ends)
	}
}

func countDispatch(obs *recordingObserver) (starts, ends int) {
	calls, _, _ := obs.snapshot()
	for _, c := range calls {
		switch c {
		case "StartDispatch":
			starts++
		case "EndDispatch":
			ends++
		}
	}
	return starts, ends
}

// After a failed batch the next one starts with a probe of Concurrency
// rows: when they fail too, the rest are released untried (no failure
// counted on them) rather than handed to a transport that is down; once
// the transport is back they are all sent.
func TestPipelinedHandOverProbesAFailingTransport(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr, store := newBatchTransport(), bus.NewMemoryPersistence()
	tr.down.Store(true)
	// The first call returns at once; the probe waits for the test to have
	// seen it, so the clock the test moves cannot bring a third call first.
	tr.gate = make(chan struct{}, 1)
	tr.gate <- struct{}{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock,
		// Claims without look-ahead: one claim per batch, so the calls
		// the probe is counted in are the dispatcher's batches.
		Dispatcher: bus.DispatcherConfig{Concurrency: 4, RetryBackoff: time.Hour, LookAhead: -1}}, nil)
	send := func(n int) {
		for range n {
			if err := b.Send(ctxT(t), PlaceOrder{ID: "x"}, bus.To("billing"), bus.DeliverAfter(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(1)
	advanceUntil(t, clock, "the first failure", func() bool { return len(tr.callSizes()) == 1 })
	send(20)
	advanceUntil(t, clock, "the probe", func() bool { return len(tr.callSizes()) == 2 })
	close(tr.gate) // no call waits from here on
	// Wait for the batch to be settled: the probe's rows carry a failure.
	failed := func() (n int) {
		for _, r := range scheduledRows(t, store) {
			if r.Failures > 0 {
				n++
			}
		}
		return n
	}
	drivertest.Eventually(t, 30*time.Second, func() bool { return failed() == 5 }, "5 rows to carry a failure")
	if got := tr.callSizes(); got[1] != 4 {
		t.Errorf("call sizes %v: the batch after a failure should start with a probe of 4", got)
	}
	if n := failed(); n != 5 {
		t.Errorf("%d rows carry a failure, want 5 (the first row and the probe's 4); the rest were released", n)
	}
	tr.down.Store(false)
	advanceUntil(t, clock, "the released rows sent", func() bool { return tr.Len("billing") == 16 })
	if n := store.Len(); n != 5 {
		t.Errorf("%d rows left, want the 5 that failed (retried after their backoff)", n)
	}
}

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// refusingTransport is the in-memory transport, except that sends to the
// queue "nowhere" fail permanently (bus.Permanent), like a RabbitMQ
// NO_ROUTE, and the first transientFails sends of each message to "flaky"
// fail transiently, like a broker that is down. It counts the hand-overs
// tried to those two queues, by message ID.
type refusingTransport struct {
	*bus.MemoryTransport
	transientFails int

	mu    sync.Mutex
	tries map[string]int
}

func newRefusingTransport(transientFails int) *refusingTransport {
	return &refusingTransport{MemoryTransport: bus.NewMemoryTransport(), transientFails: transientFails, tries: map[string]int{}}
}

func (r *refusingTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if queue != "nowhere" && queue != "flaky" {
		return r.MemoryTransport.Send(ctx, queue, env)
	}
	r.mu.Lock()
	r.tries[env.ID]++
	n := r.tries[env.ID]
	r.mu.Unlock()
	switch {
	case queue == "nowhere":
		return bus.Permanent(fmt.Errorf("queue %s does not exist", queue))
	case n <= r.transientFails:
		return errors.New("broker unreachable")
	}
	return r.MemoryTransport.Send(ctx, queue, env)
}

func (r *refusingTransport) triesOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tries[id]
}

// TestPermanentHandOverFailureUsesTheSendersBudget: a due message the
// transport refuses permanently goes to the error queue after the retry
// budget of the endpoint that scheduled it (none by default), with the
// reason; a transient failure is retried as long as the sender's budget
// says (for ever by default), whichever endpoint's dispatcher claims the
// row and whatever its own budget.
func TestPermanentHandOverFailureUsesTheSendersBudget(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr := newRefusingTransport(6)
	store := bus.NewMemoryPersistence()
	cfg := func(endpoint string, retries int, sendOnly bool) bus.Config {
		return bus.Config{Endpoint: endpoint, Transport: tr, Persistence: store, Clock: clock, SendOnly: sendOnly,
			Logger: quiet(), Dispatcher: bus.DispatcherConfig{NumberOfRetries: retries, RetryBackoff: time.Second}}
	}
	budget2 := bustest.StartBus(t, cfg("shop", 2, true), nil)
	noBudget := bustest.StartBus(t, cfg("shop0", 0, true), nil)
	ops := bustest.StartBus(t, cfg("ops", 5, false), nil) // its own budget must not apply
	send := func(b *bus.Bus, id, queue string) {
		t.Helper()
		if err := b.Send(ctxT(t), PlaceOrder{ID: id}, bus.To(queue), bus.WithMessageID(id), bus.DeliverAfter(time.Minute)); err != nil {
			t.Fatalf("delayed send of %s: %v", id, err)
		}
	}
	send(budget2, "perm-2", "nowhere")
	send(noBudget, "perm-0", "nowhere")
	send(noBudget, "transient-0", "flaky")
	clock.Advance(time.Minute)
	advanceUntil(t, clock, "both refused messages in the error queue and the flaky one delivered", func() bool {
		return tr.Len("error") == 2 && tr.Len("flaky") == 1
	})
	for id, want := range map[string]int{"perm-2": 3, "perm-0": 1, "transient-0": 7} {
		if got := tr.triesOf(id); got != want {
			t.Errorf("%s: %d hand-overs tried, want %d", id, got, want)
		}
	}
	for range 2 {
		env := receiveOne(t, tr.MemoryTransport, "error")
		if !strings.Contains(env.Header(bus.HeaderFailureReason), "queue nowhere does not exist") ||
			env.Header(bus.HeaderFailureKind) != "dispatch" || !strings.HasPrefix(env.ID, "perm-") {
			t.Errorf("error queue got %s with headers %v, want a refused message with the reason", env.ID, env.Headers)
		}
	}
	// A row is deleted after its message reached the error queue.
	drivertest.Eventually(t, 30*time.Second, func() bool { return store.Len() == 0 }, "the rows to be deleted")
	if rows := scheduledRows(t, store); len(rows) != 0 {
		t.Errorf("%d rows left in the store, want 0", len(rows))
	}
	if m := ops.Metrics(); m.Dispatched != 1 || m.MovedToError != 2 || m.Sent != 0 {
		t.Errorf("dispatching endpoint's metrics: dispatched %d, moved to error %d, sent %d; want 1, 2, 0", m.Dispatched, m.MovedToError, m.Sent)
	}
}

// TestMetricsSeparateSentFromDispatched: Sent counts what the endpoint sent
// itself, Dispatched the due rows its dispatcher handed over; a scheduled
// message counts once in each of Scheduled and Dispatched, never in Sent.
func TestMetricsSeparateSentFromDispatched(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Clock: clock, Logger: quiet()}, nil)
	for _, opt := range []bus.Option{nil, nil, bus.DeliverAfter(time.Minute)} {
		if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), opt); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	advanceUntil(t, clock, "the delayed message dispatched", func() bool { return tr.Len("billing") == 3 })
	advanceUntil(t, clock, "the dispatch counted", func() bool { return b.Metrics().Dispatched == 1 })
	if m := b.Metrics(); m.Sent != 2 || m.Scheduled != 1 || m.Dispatched != 1 {
		t.Errorf("sent %d, scheduled %d, dispatched %d; want 2, 1, 1", m.Sent, m.Scheduled, m.Dispatched)
	}
}

// TestPermanentFailuresDoNotStopABatch: messages the transport refuses are
// no sign that the transport is down, so they do not make the dispatcher
// release the rest of the batch untried.
func TestPermanentFailuresDoNotStopABatch(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr := newRefusingTransport(0)
	obs := &recordingObserver{}
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Clock: clock, Logger: quiet(), Observer: obs,
		Dispatcher: bus.DispatcherConfig{Concurrency: 1, LookAhead: -1}}, nil)
	var batch bus.Batch
	for i := range 5 {
		batch.Send(PlaceOrder{}, bus.To("nowhere"), bus.WithMessageID(fmt.Sprintf("perm-%d", i)), bus.DeliverAfter(time.Minute))
	}
	batch.Send(PlaceOrder{}, bus.To("billing"), bus.WithMessageID("z-good"), bus.DeliverAfter(time.Minute))
	if err := b.SendBatch(ctxT(t), &batch); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	advanceUntil(t, clock, "every row settled", func() bool { return tr.Len("error") == 5 && tr.Len("billing") == 1 })
	if got := claimEvents(obs); len(got) != 1 || got[0] != 6 {
		t.Errorf("claims %v, want one claim of the 6 rows: refused rows must not stop the batch", got)
	}
}

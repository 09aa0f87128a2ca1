package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

type orderStep struct{ N int }

func (orderStep) MessageName() string { return "postgres_test.OrderStep" }

type orderTrigger struct{}

func (orderTrigger) MessageName() string { return "postgres_test.OrderTrigger" }

// keyedSink starts a bus on queue that records the steps it receives, one
// at a time: it receives them in the order they reached the transport.
func keyedSink(t *testing.T, tr bus.Transport, queue string) *bustest.Recorder[orderStep] {
	rec := bustest.NewRecorder[orderStep]()
	bustest.StartBus(t, bus.Config{Endpoint: queue, Transport: tr, Concurrency: 1}, func(b *bus.Bus) {
		_ = bus.Handle(b, rec.Handler)
	})
	return rec
}

func stepNumbers(rec *bustest.Recorder[orderStep]) []int {
	var got []int
	for _, s := range rec.Messages() {
		got = append(got, s.N)
	}
	return got
}

func sendingOrder(n int) []int {
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	return want
}

// The rows of one outbox handling share a due time and were claimed by
// their IDs, hashes of the handled message's, then handed over
// concurrently: 20 sends with one ordering key arrived shuffled, even with
// Dispatcher.Concurrency 1. They now arrive in sending order, from one
// handling and from one SendBatch, with Concurrency 1 and the default.
func TestKeyedSendsKeepTheirOrderThroughTheOutbox(t *testing.T) {
	t.Parallel()
	const n = 20
	for _, conc := range []int{1, 0} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			t.Parallel()
			store := newStore(t, testPool(t), postgres.Options{})
			tr := bus.NewMemoryTransport()
			handling, batched := keyedSink(t, tr, "sink-handling"), keyedSink(t, tr, "sink-batch")
			b := bustest.StartBus(t, bus.Config{Endpoint: "keyed", Transport: tr, Persistence: store,
				Outbox: bus.OutboxConfig{Enabled: true}, Dispatcher: bus.DispatcherConfig{Concurrency: conc}}, func(b *bus.Bus) {
				_ = bus.Handle(b, func(ctx context.Context, _ orderTrigger) error {
					for i := range n {
						if err := b.Send(ctx, orderStep{N: i}, bus.To("sink-handling"), bus.WithOrderingKey("order-7")); err != nil {
							return err
						}
					}
					return nil
				})
			})
			ctx := ctxTimeout(t, time.Minute)
			if err := b.Send(ctx, orderTrigger{}, bus.To("keyed")); err != nil {
				t.Fatal(err)
			}
			var batch bus.Batch
			for i := range n {
				batch.Send(orderStep{N: i}, bus.To("sink-batch"), bus.WithOrderingKey("order-8"))
			}
			if err := b.SendBatch(ctx, &batch); err != nil {
				t.Fatal(err)
			}
			handling.WaitFor(t, n)
			batched.WaitFor(t, n)
			if got := stepNumbers(handling); !slices.Equal(got, sendingOrder(n)) {
				t.Errorf("from one handling: arrived %v, want the sending order", got)
			}
			if got := stepNumbers(batched); !slices.Equal(got, sendingOrder(n)) {
				t.Errorf("from one SendBatch: arrived %v, want the sending order", got)
			}
		})
	}
}

package sqlite_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

type orderStep struct{ N int }

type orderTrigger struct{}

// The rows of one outbox handling share a due time and were claimed by
// their IDs, hashes of the handled message's: 20 sends with one ordering
// key arrived shuffled, even with Dispatcher.Concurrency 1. They now
// arrive in sending order.
func TestKeyedSendsKeepTheirOrderThroughTheOutbox(t *testing.T) {
	t.Parallel()
	const n = 20
	for _, conc := range []int{1, 0} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			t.Parallel()
			tr := bus.NewMemoryTransport()
			rec := bustest.NewRecorder[orderStep]()
			bustest.StartBus(t, bus.Config{Endpoint: "sink", Transport: tr, Concurrency: 1}, func(b *bus.Bus) {
				_ = bus.Handle(b, rec.Handler)
			})
			b := bustest.StartBus(t, bus.Config{Endpoint: "keyed", Transport: tr, Persistence: openTemp(t),
				Outbox: bus.OutboxConfig{Enabled: true}, Dispatcher: bus.DispatcherConfig{Concurrency: conc}}, func(b *bus.Bus) {
				_ = bus.Handle(b, func(ctx context.Context, _ orderTrigger) error {
					for i := range n {
						if err := b.Send(ctx, orderStep{N: i}, bus.To("sink"), bus.WithOrderingKey("order-7")); err != nil {
							return err
						}
					}
					return nil
				})
			})
			if err := b.Send(t.Context(), orderTrigger{}, bus.To("keyed")); err != nil {
				t.Fatal(err)
			}
			rec.WaitFor(t, n)
			var got []int
			for _, s := range rec.Messages() {
				got = append(got, s.N)
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(got, want) {
				t.Errorf("arrived %v, want the sending order", got)
			}
		})
	}
}

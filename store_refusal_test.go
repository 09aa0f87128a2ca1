package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// refusingStore refuses every row as invalid, as a store refuses a row too
// large for its database.
type refusingStore struct{ *bus.MemoryPersistence }

func (refusingStore) StoreOutgoing(context.Context, []bus.OutgoingMessage) error {
	return fmt.Errorf("row too large for the database: %w", bus.ErrInvalidMessage)
}

// TestStoreRefusalOfAnInvalidMessageDoesNotTripTheStoreBreaker: a store
// that refuses a message as invalid is working; only that message failed,
// so the store breaker does not report the store as failing however long
// such refusals go on.
func TestStoreRefusalOfAnInvalidMessageDoesNotTripTheStoreBreaker(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tripped := make(chan error, 4)
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Persistence: refusingStore{bus.NewMemoryPersistence()}, Clock: clock,
		SendOnly: true, Logger: quiet(), CircuitBreakers: bus.CircuitBreakerConfig{Store: time.Second},
		OnCriticalError: func(err error) { tripped <- err }}, nil)
	for range 3 {
		if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("billing"), bus.DeliverAfter(time.Hour)); !errors.Is(err, bus.ErrInvalidMessage) {
			t.Fatalf("Send = %v, want ErrInvalidMessage", err)
		}
		clock.Advance(2 * time.Second)
	}
	select {
	case err := <-tripped:
		t.Errorf("the store breaker tripped on invalid messages: %v", err)
	default:
	}
}

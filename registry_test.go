package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

var namedHandlerCalls atomic.Int64

func namedPlaceOrderHandler(context.Context, PlaceOrder) error {
	namedHandlerCalls.Add(1)
	return nil
}

// TestSameHandlerRegisteredTwiceIsRefused: registering one function (or
// one closure value) twice for a type is refused, and the message is
// handled once.
func TestSameHandlerRegisteredTwiceIsRefused(t *testing.T) {
	tr := bus.NewMemoryTransport()
	var closureCalls atomic.Int64
	closure := func(context.Context, OrderPlaced) error { closureCalls.Add(1); return nil }
	var errs []error
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		errs = append(errs,
			bus.Handle(b, namedPlaceOrderHandler), bus.Handle(b, namedPlaceOrderHandler),
			bus.Handle(b, closure), bus.Handle(b, closure))
	})
	for i, want := range []bool{false, true, false, true} {
		if got := errors.Is(errs[i], bus.ErrInvalidRegistration); got != want {
			t.Errorf("registration %d = %v, want ErrInvalidRegistration: %v", i+1, errs[i], want)
		}
	}
	if err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales")); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctxT(t), OrderPlaced{}); err != nil {
		t.Fatal(err)
	}
	drivertest.Eventually(t, 10*time.Second, func() bool { return b.Metrics().Handled >= 2 }, "both messages handled")
	if n, m := namedHandlerCalls.Load(), closureCalls.Load(); n != 1 || m != 1 {
		t.Errorf("handlers ran %d and %d times for one message each, want 1 and 1", n, m)
	}
}

// TestClosuresOfOneLiteralMayBothBeRegistered: two closures made by the
// same code but capturing different state are different handlers.
func TestClosuresOfOneLiteralMayBothBeRegistered(t *testing.T) {
	t.Parallel()
	b, _ := bus.New(bus.Config{Endpoint: "sales", Logger: quiet()})
	var hits [2]atomic.Int64
	for i := range hits {
		if err := bus.Handle(b, func(context.Context, PlaceOrder) error { hits[i].Add(1); return nil }); err != nil {
			t.Fatalf("closure %d refused: %v", i, err)
		}
	}
}

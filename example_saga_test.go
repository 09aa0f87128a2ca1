package bus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// An order saga: started by PlaceOrder, completed by the payment, with a
// payment timeout that is cancelled when the payment comes first.
func ExampleNewSaga() {
	ctx := context.Background()
	b, _ := bus.New(bus.Config{Endpoint: "orders", Logger: quiet()})
	done := make(chan string, 1)

	type Order struct{ ID string }
	s := bus.NewSaga[Order](b, "order")
	_ = bus.SagaStartedBy(s, func(m SagaStart) string { return m.OrderID },
		func(ctx context.Context, o *Order, m SagaStart) error {
			o.ID = m.OrderID
			return bus.RequestTimeout(ctx, PaymentOverdue{}, time.Hour)
		})
	_ = bus.SagaHandle(s, func(m SagaPay) string { return m.OrderID },
		func(ctx context.Context, o *Order, m SagaPay) error {
			bus.CompleteSaga(ctx) // deletes the state, cancels the timeout
			done <- o.ID
			return nil
		})
	_ = bus.SagaTimeout(s, func(ctx context.Context, o *Order, _ PaymentOverdue) error {
		fmt.Println("overdue:", o.ID)
		return nil
	})
	_ = b.Start(ctx)
	defer b.Stop(ctx)

	_ = b.Send(ctx, SagaStart{OrderID: "o-1"}, bus.To("orders"))
	_ = b.Send(ctx, SagaPay{OrderID: "o-1"}, bus.To("orders"), bus.DeliverAfter(10*time.Millisecond))
	fmt.Println("paid:", <-done)
	// Output: paid: o-1
}

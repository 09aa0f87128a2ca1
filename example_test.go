package bus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// Two endpoints in one process share an in-memory transport: the shop sends
// a command to sales, which replies.
func Example() {
	ctx := context.Background()
	transport := bus.NewMemoryTransport()
	done := make(chan string)

	sales, _ := bus.New(bus.Config{Endpoint: "sales", Transport: transport, Logger: quiet()})
	_ = bus.Handle(sales, func(ctx context.Context, m PlaceOrder) error {
		return bus.Reply(ctx, OrderPlaced{ID: m.ID})
	})
	shop, _ := bus.New(bus.Config{Endpoint: "shop", Transport: transport, Logger: quiet()})
	_ = bus.Route[PlaceOrder](shop, "sales")
	_ = bus.Handle(shop, func(ctx context.Context, m OrderPlaced) error {
		done <- m.ID
		return nil
	})
	_ = sales.Start(ctx)
	_ = shop.Start(ctx)
	defer sales.Stop(ctx)
	defer shop.Stop(ctx)

	_ = shop.Send(ctx, PlaceOrder{ID: "o-1"})
	fmt.Println("reply for", <-done)
	// Output: reply for o-1
}

// A message sent with DeliverAfter is stored and delivered when due.
func ExampleDeliverAfter() {
	ctx := context.Background()
	b, _ := bus.New(bus.Config{Endpoint: "reminders", Logger: quiet()})
	got := make(chan time.Duration)
	start := time.Now()
	_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		got <- time.Since(start)
		return nil
	})
	_ = b.Start(ctx)
	defer b.Stop(ctx)

	_ = b.Send(ctx, PlaceOrder{ID: "o-1"}, bus.To("reminders"), bus.DeliverAfter(200*time.Millisecond))
	fmt.Println("delivered after 200ms:", <-got >= 200*time.Millisecond)
	// Output: delivered after 200ms: true
}

// CancelScheduled removes a scheduled message before it is due.
func ExampleBus_CancelScheduled() {
	ctx := context.Background()
	b, _ := bus.New(bus.Config{Endpoint: "reminders", SendOnly: true, Logger: quiet()})
	_ = b.Start(ctx)
	defer b.Stop(ctx)

	_ = b.Send(ctx, PlaceOrder{}, bus.To("billing"), bus.DeliverAfter(time.Hour), bus.WithMessageID("reminder-1"))
	ok, err := b.CancelScheduled(ctx, "reminder-1")
	fmt.Println(ok, err)
	// Output: true <nil>
}

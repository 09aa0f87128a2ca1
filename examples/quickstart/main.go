// Command quickstart runs four endpoints in one process over the in-memory
// transport: a shop sends a command, sales replies and publishes an event
// that billing and shipping both receive, and sales schedules a reminder for
// one second later.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/postbus/bus"
)

// PlaceOrder is a command sent by the shop to sales.
type PlaceOrder struct {
	OrderID string
	Amount  float64
}

// OrderAccepted is sales' reply to PlaceOrder.
type OrderAccepted struct{ OrderID string }

// OrderPlaced is an event published by sales.
type OrderPlaced struct{ OrderID string }

// PaymentReminder is a command sales schedules to itself.
type PaymentReminder struct{ OrderID string }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6.3fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	transport := bus.NewMemoryTransport() // shared: that is how the endpoints reach each other
	var done sync.WaitGroup
	done.Add(5) // reply, two event deliveries, reminder, and the shop's own start

	newBus := func(name string) (*bus.Bus, error) {
		return bus.New(bus.Config{Endpoint: name, Transport: transport, Logger: logger})
	}
	shop, err := newBus("shop")
	if err != nil {
		return err
	}
	sales, err := newBus("sales")
	if err != nil {
		return err
	}
	billing, err := newBus("billing")
	if err != nil {
		return err
	}
	shipping, err := newBus("shipping")
	if err != nil {
		return err
	}

	_ = bus.Route[PlaceOrder](shop, "sales")
	_ = bus.Route[PaymentReminder](sales, "sales")
	_ = bus.Handle(sales, func(ctx context.Context, m PlaceOrder) error {
		say("sales     received PlaceOrder %s (%.2f)", m.OrderID, m.Amount)
		if err := bus.Reply(ctx, OrderAccepted{OrderID: m.OrderID}); err != nil {
			return err
		}
		if err := sales.Send(ctx, PaymentReminder{OrderID: m.OrderID}, bus.DeliverAfter(time.Second)); err != nil {
			return err
		}
		return sales.Publish(ctx, OrderPlaced{OrderID: m.OrderID})
	})
	_ = bus.Handle(sales, func(_ context.Context, m PaymentReminder) error {
		say("sales     received PaymentReminder %s (scheduled for one second later)", m.OrderID)
		done.Done()
		return nil
	})
	_ = bus.Handle(shop, func(ctx context.Context, m OrderAccepted) error {
		say("shop      received reply OrderAccepted %s (correlation %s)", m.OrderID, bus.IncomingMessage(ctx).CorrelationID)
		done.Done()
		return nil
	})
	_ = bus.Handle(billing, func(_ context.Context, m OrderPlaced) error {
		say("billing   received event OrderPlaced %s", m.OrderID)
		done.Done()
		return nil
	})
	_ = bus.Handle(shipping, func(_ context.Context, m OrderPlaced) error {
		say("shipping  received event OrderPlaced %s", m.OrderID)
		done.Done()
		return nil
	})

	for _, b := range []*bus.Bus{sales, billing, shipping, shop} {
		if err := b.Start(ctx); err != nil {
			return err
		}
		defer b.Stop(context.Background())
	}
	say("shop      sends PlaceOrder o-1001")
	if err := shop.Send(ctx, PlaceOrder{OrderID: "o-1001", Amount: 42.5}); err != nil {
		return err
	}
	done.Done()

	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
		say("done")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("timed out waiting for the exchange: %w", ctx.Err())
	}
}

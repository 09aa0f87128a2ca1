package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/rabbitmq"
)

// PlaceOrder is the command of the examples.
type PlaceOrder struct{ OrderID string }

// New checks the URL and options at once; the connection is made in the
// background, and calls that need it wait for it.
func ExampleNew() {
	t, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Options{
		QueueType:      rabbitmq.QueueTypeQuorum, // the default
		EventsExchange: "sales.events",
		ConnectionName: "sales-api",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(context.Background())
}

// An invalid option makes New fail before anything connects.
func ExampleOptionsError() {
	_, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Options{QueueType: "mirrored"})
	fmt.Println(errors.Is(err, rabbitmq.ErrInvalidOptions))
	fmt.Println(err)
	// Output:
	// true
	// rabbitmq: invalid options: QueueType: must be "quorum" or "classic"
}

// A wrong password, or a vhost that does not exist, makes Start fail at
// once with the broker's reason instead of waiting for a connection that
// can never succeed.
func ExamplePermanentError() {
	t, err := rabbitmq.New("amqp://guest:wrong@127.0.0.1:5672/", rabbitmq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(context.Background())
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: t})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = b.Start(ctx)
	switch {
	case errors.Is(err, rabbitmq.ErrPermanent):
		// Retrying cannot help; the message has the broker's reason, e.g.
		// Exception (403) Reason: "username or password not allowed".
		log.Fatalf("check the RabbitMQ configuration: %v", err)
	case err != nil:
		log.Fatal(err) // the broker stayed unreachable for a minute
	}
	defer b.Stop(context.Background())
}

// A bus on RabbitMQ: Start provisions the endpoint's quorum queue, the
// error queue and the event bindings, then consumes.
func Example_bus() {
	t, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(context.Background())

	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: t})
	if err != nil {
		log.Fatal(err)
	}
	_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		fmt.Println("placing", m.OrderID)
		return nil
	})
	_ = bus.Route[PlaceOrder](b, "sales")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Stop(context.Background())

	// Returns once RabbitMQ confirmed the persistent message. During an
	// outage it waits for the reconnection until ctx ends.
	if err := b.Send(ctx, PlaceOrder{OrderID: "42"}); err != nil {
		log.Fatal(err)
	}
}

// Command smokeapp is the program the release check builds in a fresh
// folder outside the repository, from the released modules only: it
// imports every library module, calls something real from each, and
// delivers one message over the in-memory transport.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
	"github.com/postbus/bus/kafka"
	"github.com/postbus/bus/mongodb"
	"github.com/postbus/bus/mysql"
	"github.com/postbus/bus/nats"
	otelbus "github.com/postbus/bus/otel"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
	"github.com/postbus/bus/redis"
	"github.com/postbus/bus/sqlite"
	"github.com/postbus/bus/sqs"
)

// Hello is the message the app sends to itself.
type Hello struct{ Text string }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "smokeapp:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	fmt.Println("postgres: migrations:", len(postgres.Migrations()))
	// Each driver checks its options before it contacts anything: a
	// refusal proves the driver's code ran.
	refusals := map[string]error{}
	_, refusals["rabbitmq"] = rabbitmq.New("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Options{QueueType: "mirrored"})
	_, refusals["nats"] = nats.New(nil, nats.Options{})
	_, refusals["redis"] = redis.New(nil, redis.Options{})
	_, refusals["kafka"] = kafka.New([]string{"127.0.0.1:9092"}, kafka.Options{Partitions: -1})
	_, refusals["sqs"] = sqs.New(nil, nil, sqs.Options{})
	_, refusals["mongodb"] = mongodb.New(nil, mongodb.Options{})
	_, refusals["mysql"] = mysql.New(nil, mysql.Options{})
	_, refusals["console"] = console.Handler(console.Options{})
	for _, name := range []string{"console", "kafka", "mongodb", "mysql", "nats", "rabbitmq", "redis", "sqs"} {
		if refusals[name] == nil {
			return fmt.Errorf("%s accepted options it must refuse", name)
		}
		fmt.Printf("%s: refused: %v\n", name, refusals[name])
	}

	dir, err := os.MkdirTemp("", "smokeapp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(filepath.Join(dir, "bus.db"), sqlite.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	observer, err := otelbus.New(otelbus.Options{})
	if err != nil {
		return err
	}

	b, err := bus.New(bus.Config{Endpoint: "smoke", Persistence: store, Observer: observer})
	if err != nil {
		return err
	}
	got := make(chan string, 1)
	if err := bus.Handle(b, func(ctx context.Context, m Hello) error {
		got <- m.Text
		return nil
	}); err != nil {
		return err
	}
	if err := bus.Route[Hello](b, "smoke"); err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.Background())
	// Delayed, so it goes through the SQLite store and the dispatcher.
	if err := b.Send(ctx, Hello{Text: "hello from the released modules"}, bus.DeliverAfter(50*time.Millisecond)); err != nil {
		return err
	}
	select {
	case text := <-got:
		fmt.Println("delivered:", text)
		return nil
	case <-ctx.Done():
		return errors.New("the message was not delivered within a minute")
	}
}

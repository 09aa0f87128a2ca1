// Command redis-only runs a bus on Redis alone: the Redis Streams
// transport carries the messages and the Redis persistence keeps the
// delayed ones and a recurring schedule made at runtime. It sends a
// reminder due in a second, sets a heartbeat schedule every second, waits
// for the reminder and two heartbeats, deletes the schedule and exits.
//
//	go run ./examples/redis-only                       # Redis on 127.0.0.1:6379
//	REDIS_ADDR=redis.internal:6379 go run ./examples/redis-only
//
// On a Redis Cluster, give both a goredis.NewClusterClient, and the
// transport a hash-tagged prefix ("{postbus}"): see docs/persistence/redis.md.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/redis"
)

// Reminder is sent with a delay.
type Reminder struct{ Text string }

// Heartbeat is sent by the recurring schedule.
type Heartbeat struct{ From string }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := goredis.NewClient(&goredis.Options{Addr: cmp.Or(os.Getenv("REDIS_ADDR"), "127.0.0.1:6379")})
	defer rdb.Close()
	// The keys of the transport and the store start with the prefix; a
	// second run uses the same ones.
	if err := run(ctx, rdb, "example-redis-only", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run starts a bus on rdb under prefix, and prints what it delivered.
func run(ctx context.Context, rdb goredis.UniversalClient, prefix string, out io.Writer) error {
	transport, err := redis.New(rdb, redis.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	defer transport.Close(context.Background())
	store, err := redis.NewPersistence(rdb, redis.PersistenceOptions{Prefix: prefix})
	if err != nil {
		return err
	}
	b, err := bus.New(bus.Config{Endpoint: "reminders", Transport: transport, Persistence: store,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	reminders := make(chan string, 1)
	beats := make(chan time.Time, 8)
	_ = bus.Handle(b, func(ctx context.Context, m Reminder) error {
		reminders <- m.Text
		return nil
	})
	_ = bus.Handle(b, func(ctx context.Context, m Heartbeat) error {
		tick, _ := time.Parse(time.RFC3339Nano, bus.IncomingMessage(ctx).Header(bus.HeaderRecurringTick))
		select {
		case beats <- tick:
		default:
		}
		return nil
	})
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.Background())
	fmt.Fprintf(out, "durable: %v (appendonly or replicas on the server)\n", store.Durable())

	// A schedule made at runtime is stored in Redis: every process on it
	// runs it, each tick once.
	err = b.SetRecurring(ctx, bus.RecurringSpec{Name: "heartbeat", Schedule: "@every 1s", Missed: bus.MissedSkip,
		Message: Heartbeat{From: "redis-only"}, Options: []bus.Option{bus.To("reminders")}})
	if err != nil {
		return err
	}

	sent := time.Now()
	if err := b.Send(ctx, Reminder{Text: "call the customer"}, bus.To("reminders"), bus.DeliverAfter(time.Second)); err != nil {
		return err
	}
	select {
	case text := <-reminders:
		fmt.Fprintf(out, "reminder %q after at least a second: %v\n", text, time.Since(sent) >= time.Second)
	case <-ctx.Done():
		return fmt.Errorf("no reminder: %w", ctx.Err())
	}
	for i := range 2 {
		select {
		case tick := <-beats:
			fmt.Fprintf(out, "heartbeat %d on a whole second: %v\n", i+1, !tick.IsZero() && tick.Equal(tick.Truncate(time.Second)))
		case <-ctx.Done():
			return fmt.Errorf("no heartbeat: %w", ctx.Err())
		}
	}
	if err := b.DeleteRecurring(ctx, "heartbeat"); err != nil {
		return err
	}
	fmt.Fprintln(out, "heartbeat schedule deleted")
	return nil
}

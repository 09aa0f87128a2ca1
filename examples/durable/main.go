// Command durable shows scheduled messages surviving a restart: they are
// kept in a SQLite file, so a bus started after the process stopped still
// delivers them, on time when it runs at their due time, late by the
// downtime otherwise, never early.
//
// By default one run plays both lives: it schedules three reminders due in
// 1, 2 and 3 seconds, stops the bus and closes the file, stays down for 1.5
// seconds, then starts a new bus on the same file:
//
//	go run ./examples/durable
//
// Or as two real processes:
//
//	go run ./examples/durable -phase=schedule   # schedules, then exits
//	go run ./examples/durable -phase=deliver    # delivers what is pending
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// Reminder is the scheduled command; the endpoint sends it to itself.
type Reminder struct{ Text string }

const endpoint = "reminders"

func main() {
	phase := flag.String("phase", "both", "schedule, deliver, or both (schedule, restart, deliver)")
	path := flag.String("db", filepath.Join(os.TempDir(), "postbus-durable.db"), "SQLite file holding the scheduled messages")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch *phase {
	case "schedule":
		err = schedule(ctx, *path)
	case "deliver":
		err = deliver(ctx, *path)
	case "both":
		if err = schedule(ctx, *path); err == nil {
			fmt.Println("-- process down for 1.5s --")
			time.Sleep(1500 * time.Millisecond)
			err = deliver(ctx, *path)
		}
	default:
		err = fmt.Errorf("unknown -phase %q: want schedule, deliver or both", *phase)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "durable:", err)
		os.Exit(1)
	}
}

// newBus opens the file and builds the endpoint's bus on it; handle may be
// nil for a bus that only schedules.
func newBus(path string, handle func(context.Context, Reminder) error) (*bus.Bus, *sqlite.Persistence, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := sqlite.Open(path, sqlite.Options{Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	b, err := bus.New(bus.Config{Endpoint: endpoint, Persistence: store, Logger: logger})
	if err == nil {
		err = bus.Route[Reminder](b, endpoint)
	}
	if err == nil && handle != nil {
		err = bus.Handle(b, handle)
	}
	if err != nil {
		return nil, nil, errors.Join(err, store.Close())
	}
	return b, store, nil
}

// schedule stores three reminders and stops, as a process about to exit.
func schedule(ctx context.Context, path string) error {
	b, store, err := newBus(path, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := b.Start(ctx); err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		due := time.Now().Add(time.Duration(i) * time.Second)
		if err := b.Send(ctx, Reminder{Text: fmt.Sprintf("reminder %d", i)}, bus.DeliverAt(due)); err != nil {
			return errors.Join(err, b.Stop(ctx))
		}
		fmt.Printf("scheduled reminder %d, due %s\n", i, clock(due))
	}
	if err := b.Stop(ctx); err != nil {
		return err
	}
	fmt.Printf("bus stopped at %s; %s holds the reminders\n", clock(time.Now()), path)
	return nil
}

// deliver starts a new bus on the file and waits until everything that was
// pending in it has been handled.
func deliver(ctx context.Context, path string) error {
	handled := make(chan struct{}, 16)
	b, store, err := newBus(path, func(ctx context.Context, r Reminder) error {
		env := bus.IncomingMessage(ctx)
		now := time.Now()
		fmt.Printf("delivered %-10s due %s  handled %s  (%s late)\n",
			r.Text, clock(env.DueAt), clock(now), now.Sub(env.DueAt).Round(time.Millisecond))
		handled <- struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Setup(ctx); err != nil { // so Len works on a new file too
		return err
	}
	pending, err := store.Len(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("bus started at %s with %d scheduled messages in the file\n", clock(time.Now()), pending)
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.Background())
	for range pending {
		select {
		case <-handled:
		case <-ctx.Done():
			return fmt.Errorf("waiting for deliveries: %w", ctx.Err())
		}
	}
	fmt.Println("all delivered")
	return nil
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }

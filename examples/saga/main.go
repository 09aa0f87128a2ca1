// Command saga shows a saga with timeouts: an order waits for its payment,
// sends a reminder when the payment is late, and is cancelled when the
// payment is overdue. Two orders are placed: one is paid in time (the saga
// completes and its timeouts are cancelled), the other never is.
//
//	go run ./examples/saga            # in memory, about 4 seconds
//	go run ./examples/saga -postgres  # on PostgreSQL, with a restart
//
// With -postgres the saga state and the timeouts live in PostgreSQL
// (POSTBUS_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test,
// schema saga_example, emptied first): the bus is stopped after the orders are placed and
// a new one is started on the same database, as after a deployment; the
// reminder and the cancellation still arrive, from the stored timeouts.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Messages of the order process.
type (
	// PlaceOrder starts an order saga.
	PlaceOrder struct {
		OrderID string
		Amount  float64
	}
	// PaymentReceived completes it.
	PaymentReceived struct{ OrderID string }
	// PaymentReminder is a timeout: the payment is late.
	PaymentReminder struct{}
	// PaymentOverdue is a timeout: the order is cancelled.
	PaymentOverdue struct{}
)

// Order is the saga's state, stored as JSON between messages.
type Order struct {
	ID        string
	Amount    float64
	Reminders int
}

// Timing of the example: seconds here, days in a real shop.
type timing struct {
	Reminder, Overdue, PayAfter time.Duration
}

var defaultTiming = timing{Reminder: 2 * time.Second, Overdue: 4 * time.Second, PayAfter: time.Second}

func main() {
	usePostgres := flag.Bool("postgres", false, "keep saga state and timeouts in PostgreSQL, and restart the bus half-way")
	flag.Parse()
	var err error
	if *usePostgres {
		url := cmp.Or(os.Getenv("POSTBUS_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test")
		err = runPostgres(context.Background(), os.Stdout, url, "saga_example", defaultTiming)
	} else {
		err = run(context.Background(), os.Stdout, bus.NewMemoryPersistence(), defaultTiming, false)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "saga:", err)
		os.Exit(1)
	}
}

// printer writes the steps with the time since the start.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%4.1fs  %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// newOrders returns the orders endpoint on store with the order saga; done
// receives the ID of each order as its saga ends.
func newOrders(store bus.Persistence, transport bus.Transport, p *printer, t timing, done chan<- string) (*bus.Bus, error) {
	// Warnings only at Error level, to keep the example's output to its
	// steps (the in-memory store warns that it is not durable).
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	b, err := bus.New(bus.Config{Endpoint: "orders", Transport: transport, Persistence: store, Logger: logger})
	if err != nil {
		return nil, err
	}
	s := bus.NewSaga[Order](b, "order")
	err = errors.Join(
		bus.SagaStartedBy(s, func(m PlaceOrder) string { return m.OrderID },
			func(ctx context.Context, o *Order, m PlaceOrder) error {
				o.ID, o.Amount = m.OrderID, m.Amount
				p.say("%s placed (%.2f); waiting for the payment", o.ID, o.Amount)
				return errors.Join(
					bus.RequestTimeout(ctx, PaymentReminder{}, t.Reminder),
					bus.RequestTimeout(ctx, PaymentOverdue{}, t.Overdue))
			}),
		bus.SagaHandle(s, func(m PaymentReceived) string { return m.OrderID },
			func(ctx context.Context, o *Order, m PaymentReceived) error {
				p.say("%s paid; the saga completes and its timeouts are cancelled", o.ID)
				bus.CompleteSaga(ctx)
				done <- o.ID
				return nil
			}),
		bus.SagaTimeout(s, func(ctx context.Context, o *Order, _ PaymentReminder) error {
			o.Reminders++
			p.say("%s: payment reminder #%d sent", o.ID, o.Reminders)
			return nil
		}),
		bus.SagaTimeout(s, func(ctx context.Context, o *Order, _ PaymentOverdue) error {
			p.say("%s: payment overdue after %d reminder(s); order cancelled", o.ID, o.Reminders)
			bus.CompleteSaga(ctx)
			done <- o.ID
			return nil
		}),
	)
	return b, err
}

// run places two orders on store, pays the first, and waits for both sagas
// to end. With restart, it stops the bus after placing the orders and goes
// on with a new one on the same store.
func run(ctx context.Context, out io.Writer, store bus.Persistence, t timing, restart bool) error {
	p := &printer{out: out, start: time.Now()}
	transport := bus.NewMemoryTransport()
	done := make(chan string, 4)
	orders, err := newOrders(store, transport, p, t, done)
	if err != nil {
		return err
	}
	if err := orders.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = orders.Stop(context.WithoutCancel(ctx)) }()
	for _, id := range []string{"o-1", "o-2"} {
		if err := orders.Send(ctx, PlaceOrder{OrderID: id, Amount: 42.5}, bus.To("orders")); err != nil {
			return err
		}
	}
	if err := orders.Send(ctx, PaymentReceived{OrderID: "o-1"}, bus.To("orders"), bus.DeliverAfter(t.PayAfter)); err != nil {
		return err
	}
	if restart {
		time.Sleep(t.PayAfter / 2) // let the orders be placed first
		if err := orders.Stop(ctx); err != nil {
			return err
		}
		p.say("bus stopped; starting a new one on the same database")
		if orders, err = newOrders(store, transport, p, t, done); err != nil {
			return err
		}
		if err := orders.Start(ctx); err != nil {
			return err
		}
	}
	for range 2 {
		select {
		case <-done:
		case <-time.After(t.Overdue + 10*time.Second):
			return errors.New("an order saga did not end")
		}
	}
	p.say("both sagas ended")
	return nil
}

// runPostgres runs the example with the saga state and the timeouts in
// PostgreSQL, restarting the bus half-way.
func runPostgres(ctx context.Context, out io.Writer, url, schema string, t timing) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	// The schema is the example's own: start from an empty one, so an
	// interrupted earlier run leaves nothing behind.
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		return err
	}
	store, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	return run(ctx, out, store, t, true)
}

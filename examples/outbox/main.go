// Command outbox shows the transactional outbox and inbox on PostgreSQL: a
// handler saves an order and publishes OrderPlaced in one transaction, and a
// second delivery of the same message is recognised and skipped.
//
// Run it twice against the same database: the first run saves the order and
// the billing endpoint receives the event; the second run delivers the same
// message ID again, and the inbox skips it: no second order row, no second
// event.
//
//	go run ./examples/outbox
//	go run ./examples/outbox
//
// It connects to POSTBUS_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test) and keeps its tables in the
// schema outbox_example (-reset drops it first).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// PlaceOrder is the command the orders endpoint handles.
type PlaceOrder struct {
	OrderID string
	Amount  float64
}

// OrderPlaced is the event it publishes once the order is saved.
type OrderPlaced struct{ OrderID string }

func main() {
	reset := flag.Bool("reset", false, "drop the example's schema first")
	schema := flag.String("schema", "outbox_example", "schema of the example's tables")
	flag.Parse()
	url := cmp.Or(os.Getenv("POSTBUS_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test")
	if err := run(os.Stdout, url, *schema, *reset); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// run plays one run of the example: one delivery of the same PlaceOrder.
func run(out io.Writer, url, schema string, reset bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if reset {
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema+`;
		CREATE TABLE IF NOT EXISTS `+schema+`.orders (id text PRIMARY KEY, amount numeric NOT NULL)`); err != nil {
		return fmt.Errorf("create the orders table: %w", err)
	}
	store, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	tr := bus.NewMemoryTransport()
	received := make(chan OrderPlaced, 1)
	billing, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		return err
	}
	if err := bus.Handle(billing, func(_ context.Context, e OrderPlaced) error { received <- e; return nil }); err != nil {
		return err
	}
	// Each outbox handling holds a pooled connection until it commits, and
	// the dispatcher needs 2 (its queries, its LISTEN): pgxpool's default
	// of at least 4 connections serves 2 handlings at once.
	orders, err := bus.New(bus.Config{Endpoint: "orders", Transport: tr, Persistence: store,
		Outbox: bus.OutboxConfig{Enabled: true}, Concurrency: 2})
	if err != nil {
		return err
	}
	err = bus.Handle(orders, func(ctx context.Context, m PlaceOrder) error {
		tx, _ := postgres.Tx(ctx) // the transaction of this handling
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.orders (id, amount) VALUES ($1, $2)`, m.OrderID, m.Amount); err != nil {
			return err
		}
		return orders.Publish(ctx, OrderPlaced{OrderID: m.OrderID}) // stored in tx; sent after commit
	})
	if err != nil {
		return err
	}
	for _, b := range []*bus.Bus{billing, orders} {
		if err := b.Start(ctx); err != nil {
			return err
		}
		defer b.Stop(context.WithoutCancel(ctx))
	}

	// The same message ID on every run: a redelivery, as a broker would
	// make after a lost acknowledgement.
	if err := orders.Send(ctx, PlaceOrder{OrderID: "o-1001", Amount: 42.5}, bus.To("orders"),
		bus.WithMessageID("place-order-o-1001")); err != nil {
		return err
	}
	select {
	case e := <-received:
		fmt.Fprintf(out, "billing received OrderPlaced %s\n", e.OrderID)
	case <-time.After(3 * time.Second):
		if orders.Metrics().Duplicates > 0 {
			fmt.Fprintln(out, "orders: message place-order-o-1001 was already handled; the inbox skipped it")
		} else {
			return fmt.Errorf("no OrderPlaced event and no duplicate skipped")
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.orders`).Scan(&n); err != nil {
		return err
	}
	fmt.Fprintf(out, "orders table: %d row(s)\n", n)
	return nil
}

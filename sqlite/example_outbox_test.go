package sqlite_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

type PlaceOrder struct{ ID string }

type OrderPlaced struct{ ID string }

// The transactional outbox on SQLite: a handler writes through sqlite.Tx,
// so its order row, its inbox row and the event it publishes commit
// together; a second delivery of the same message ID is skipped. Outside
// handlers, sqlite.WithTx stores a message in the caller's transaction,
// begun on the store's own DB().
func ExampleTx() {
	dir, err := os.MkdirTemp("", "postbus-outbox")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	p, err := sqlite.Open(filepath.Join(dir, "orders.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	ctx := context.Background()
	if _, err := p.DB().ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		fmt.Println(err)
		return
	}

	b, err := bus.New(bus.Config{Endpoint: "orders", Transport: bus.NewMemoryTransport(), Persistence: p,
		Outbox: bus.OutboxConfig{Enabled: true}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	placed := make(chan string, 4) // buffered: a handler must not block while it holds the connection
	_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		tx, _ := sqlite.Tx(ctx) // the handling's transaction: use it, not p.DB()
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", m.ID); err != nil {
			return err
		}
		return b.Publish(ctx, OrderPlaced(m)) // stored in tx, sent after commit
	})
	_ = bus.Handle(b, func(ctx context.Context, m OrderPlaced) error { placed <- m.ID; return nil })
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = b.Stop(context.Background()) }()

	// The same message delivered twice: handled once.
	env := &bus.Envelope{ID: "msg-1", Type: bus.MessageName(PlaceOrder{}), Kind: bus.KindCommand,
		Body: []byte(`{"ID":"o-1"}`), ContentType: "application/json", Destination: "orders", SentAt: time.Now()}
	for range 2 {
		if err := b.Receive(ctx, env.Clone()); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("placed:", <-placed)

	// Outside a handler: the order row and the event in one transaction of
	// the caller's.
	tx, err := p.DB().BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ('o-2')"); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Publish(sqlite.WithTx(ctx, tx), OrderPlaced{ID: "o-2"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil { // the event goes out after this
		fmt.Println(err)
		return
	}
	fmt.Println("placed:", <-placed)

	var n int
	_ = p.DB().QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
	fmt.Println("orders:", n, "duplicates skipped:", b.Metrics().Duplicates)
	// Output:
	// placed: o-1
	// placed: o-2
	// orders: 2 duplicates skipped: 1
}

package postgres_test

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

type PlaceOrder struct{ OrderID string }

type OrderPlaced struct{ OrderID string }

// A handler writes through the handling's transaction; what it publishes
// is stored in the same transaction and sent after the commit.
func ExampleTx() {
	var b *bus.Bus // bus.New(bus.Config{…, Persistence: store, Outbox: bus.OutboxConfig{Enabled: true}})
	handler := func(ctx context.Context, m PlaceOrder) error {
		tx, ok := postgres.Tx(ctx)
		if !ok {
			return errors.New("the outbox is not enabled")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, m.OrderID); err != nil {
			return err
		}
		return b.Publish(ctx, OrderPlaced(m))
	}
	_ = handler // bus.Handle(b, handler)
}

// Outside a handler, a message sent with WithTx is stored in the caller's
// transaction: dispatched after tx.Commit, never after a rollback.
func ExampleWithTx() {
	var (
		b    *bus.Bus      // with the outbox enabled on a postgres.Persistence
		pool *pgxpool.Pool // the store's pool
	)
	send := func(ctx context.Context, orderID string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, orderID); err != nil {
			return err
		}
		if err := b.Send(postgres.WithTx(ctx, tx), PlaceOrder{OrderID: orderID}, bus.To("shipping")); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	_ = send
}

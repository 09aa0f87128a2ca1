package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// plainOutbox is an OutboxStore on the in-memory persistence whose
// handling transactions can do nothing but store messages: no TxCanceler.
// pool, when set, is what it reports as a PoolReporter.
type plainOutbox struct {
	*bus.MemoryPersistence
	pool *bus.ConnectionPool
}

func (o *plainOutbox) BeginHandling(context.Context, string, string) (bus.HandlingTx, bool, error) {
	return plainTx{o.MemoryPersistence}, false, nil
}

func (o *plainOutbox) StoreOutgoingInCallerTx(context.Context, []bus.OutgoingMessage) (bool, error) {
	return false, nil
}

func (o *plainOutbox) PurgeInbox(context.Context, time.Duration, int) (int, error) { return 0, nil }

type plainTx struct{ m *bus.MemoryPersistence }

func (plainTx) Context(ctx context.Context) context.Context { return ctx }
func (tx plainTx) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	return tx.m.StoreOutgoing(ctx, msgs)
}
func (plainTx) Commit(context.Context) error   { return nil }
func (plainTx) Rollback(context.Context) error { return nil }

// pooled is a plainOutbox that reports pool as its connection pool.
type pooled struct {
	plainOutbox
}

func (p *pooled) ConnectionPool(bus.Transport) bus.ConnectionPool { return *p.pool }

// TestCancelScheduledInAHandlingTheStoreCannotJoinIsRefused cancels from
// an outbox handling on a store without TxCanceler: the cancel must fail
// with ErrCannotJoinTx instead of running outside the transaction, and so
// must ScheduledBacklog; after the handling, the ctx cancels nothing.
func TestCancelScheduledInAHandlingTheStoreCannotJoinIsRefused(t *testing.T) {
	t.Parallel()
	store := &plainOutbox{MemoryPersistence: bus.NewMemoryPersistence()}
	b, err := bus.New(bus.Config{Endpoint: "orders", Persistence: store, Logger: quiet(),
		Outbox: bus.OutboxConfig{Enabled: true}, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}})
	if err != nil {
		t.Fatal(err)
	}
	var cancelErr, backlogErr error
	var kept context.Context
	if err := bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
		_, cancelErr = b.CancelScheduled(ctx, m.ID)
		_, backlogErr = b.ScheduledBacklog(ctx)
		kept = ctx
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	if err := b.Send(ctx, OrderPlaced{ID: "r1"}, bus.To("billing"), bus.DeliverAfter(time.Hour), bus.WithMessageID("r1")); err != nil {
		t.Fatal(err)
	}
	body := `{"ID":"r1"}`
	env := &bus.Envelope{ID: "m1", Type: bus.MessageName(PlaceOrder{}), Kind: bus.KindCommand, Body: []byte(body),
		ContentType: "application/json", Destination: "orders"}
	if err := b.Receive(ctx, env); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cancelErr, bus.ErrCannotJoinTx) || !strings.Contains(cancelErr.Error(), "plainOutbox") {
		t.Errorf("CancelScheduled in the handling = %v; want ErrCannotJoinTx naming the persistence", cancelErr)
	}
	if !errors.Is(backlogErr, bus.ErrCannotJoinTx) {
		t.Errorf("ScheduledBacklog in the handling = %v; want ErrCannotJoinTx", backlogErr)
	}
	if _, err := b.CancelScheduled(kept, "r1"); !errors.Is(err, bus.ErrHandlerDone) {
		t.Errorf("CancelScheduled with the ctx of a settled handling = %v; want ErrHandlerDone", err)
	}
	if ok, err := b.CancelScheduled(ctx, "r1"); !ok || err != nil {
		t.Errorf("CancelScheduled outside the handling = %v, %v; want the reminder still there to cancel", ok, err)
	}
}

// TestStartChecksThePersistencesPool starts buses on a persistence that
// reports its pool: Start refuses one the bus cannot fit, naming the
// numbers, starts one that fits, and only warns about a pool whose
// callers take turns.
func TestStartChecksThePersistencesPool(t *testing.T) {
	t.Parallel()
	start := func(pool bus.ConnectionPool, outbox bool, concurrency int, logs *logBuffer) error {
		store := &pooled{plainOutbox{MemoryPersistence: bus.NewMemoryPersistence(), pool: &pool}}
		b, err := bus.New(bus.Config{Endpoint: "orders", Persistence: store, Logger: logs.logger(),
			Concurrency: concurrency, Outbox: bus.OutboxConfig{Enabled: outbox}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Stop(context.Background()) })
		return b.Start(ctxT(t))
	}
	var ce *bus.ConfigError
	err := start(bus.ConnectionPool{MaxConns: 5, WatchConns: 1}, true, 4, &logBuffer{})
	if !errors.As(err, &ce) || ce.Field != "Concurrency" ||
		!strings.Contains(err.Error(), "6 in all") || !strings.Contains(err.Error(), "Concurrency to 3") {
		t.Errorf("outbox Concurrency 4 on MaxConns 5 with a LISTEN connection: %v; want a *ConfigError naming 6 and 3", err)
	}
	if err := start(bus.ConnectionPool{MaxConns: 6, WatchConns: 1}, true, 4, &logBuffer{}); err != nil {
		t.Errorf("outbox Concurrency 4 on MaxConns 6: %v", err)
	}
	if err := start(bus.ConnectionPool{MaxConns: 2, WatchConns: 1}, false, 8, &logBuffer{}); err != nil {
		t.Errorf("without the outbox, Concurrency needs no connection of its own: %v", err)
	}
	err = start(bus.ConnectionPool{MaxConns: 1, WatchConns: 1}, false, 8, &logBuffer{})
	if !errors.As(err, &ce) || ce.Field != "Persistence" || !strings.Contains(err.Error(), "at least 2") {
		t.Errorf("a LISTEN connection and the dispatcher on MaxConns 1: %v; want a *ConfigError asking for 2", err)
	}
	var logs logBuffer
	if err := start(bus.ConnectionPool{MaxConns: 1, Serialized: true}, true, 3, &logs); err != nil {
		t.Errorf("a serialized pool: %v; want a warning, not a refusal", err)
	}
	if n := strings.Count(logs.String(), "MaxConns 1"); n != 1 {
		t.Errorf("a serialized pool too small for Concurrency 3 logged %d warnings; want 1:\n%s", n, logs.String())
	}
}

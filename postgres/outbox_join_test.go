package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// joinCommand is what the handlings of these tests handle; Fail makes the
// handling fail after its work.
type joinCommand struct {
	Key  string
	Fail bool
}

// receive runs one handling of m on b to its conclusion.
func receive(t *testing.T, b *bus.Bus, id string, m joinCommand) {
	t.Helper()
	body := `{"Key":"` + m.Key + `","Fail":false}`
	if m.Fail {
		body = `{"Key":"` + m.Key + `","Fail":true}`
	}
	env := &bus.Envelope{ID: id, Type: bus.MessageName(joinCommand{}), Kind: bus.KindCommand, Body: []byte(body),
		ContentType: "application/json", Destination: b.Endpoint(), SentAt: time.Now().UTC()}
	if err := b.Receive(ctxTimeout(t, time.Minute), env); err != nil {
		t.Fatalf("Receive %s: %v", id, err)
	}
}

// TestDelayedSendThroughAnotherBusJoinsTheHandlingsTransaction has the
// handler of one bus schedule a message through a second bus on the same
// store: the row must be stored in the handling's transaction, gone with a
// failed handling and kept with a committed one, not stored beside it on a
// second connection.
func TestDelayedSendThroughAnotherBusJoinsTheHandlingsTransaction(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	tr := bus.NewMemoryTransport()
	ns := bustest.Namespace()
	other := bustest.StartBus(t, bus.Config{Endpoint: ns + "-other", Transport: tr, Persistence: store, SendOnly: true}, nil)
	var sendErr atomic.Value
	b := bustest.StartBus(t, bus.Config{Endpoint: ns, Transport: tr, Persistence: store,
		Outbox: bus.OutboxConfig{Enabled: true}, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m joinCommand) error {
			if err := other.Send(ctx, bustest.OutboxReminder{Key: m.Key}, bus.To(ns+"-billing"), bus.DeliverAfter(time.Hour)); err != nil {
				sendErr.Store(err)
				return err
			}
			if m.Fail {
				return bus.Unrecoverable(errors.New("fails after scheduling"))
			}
			return nil
		})
	})
	receive(t, b, ns+"-m1", joinCommand{Key: "failed", Fail: true})
	if err, _ := sendErr.Load().(error); err != nil {
		t.Fatalf("Send through the other bus: %v", err)
	}
	if n := storedRows(t, pool, store); n != 0 {
		t.Fatalf("a failed handling left %d scheduled rows; want its send rolled back", n)
	}
	receive(t, b, ns+"-m2", joinCommand{Key: "committed"})
	if n := storedRows(t, pool, store); n != 1 {
		t.Errorf("a committed handling left %d scheduled rows; want 1", n)
	}
}

// poolCancelRefused is the store with CancelOutgoing, the cancel on the
// pool beside any transaction, refused: only a cancel in the transaction
// (CancelOutgoingInTx) reaches the table.
type poolCancelRefused struct{ *postgres.Persistence }

func (poolCancelRefused) CancelOutgoing(context.Context, string) (bool, error) {
	return false, errors.New("cancel on a second connection")
}

type joinOverdue struct{}

type joinSaga struct{ Key string }

// TestCompleteSagaCancelsTimeoutsInTheHandlingsTransaction completes a
// saga instance that has a pending timeout: the timeout must be cancelled
// in the handling's transaction, kept when the handling fails, and gone
// when it commits, with no cancel beside the transaction (a crash between
// the commit and such a cancel would leave the timeout behind).
func TestCompleteSagaCancelsTimeoutsInTheHandlingsTransaction(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ns := bustest.Namespace()
	b := bustest.StartBus(t, bus.Config{Endpoint: ns, Transport: bus.NewMemoryTransport(), Persistence: poolCancelRefused{store},
		Outbox: bus.OutboxConfig{Enabled: true}, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		s := bus.NewSaga[joinSaga](b, "join")
		key := func(m joinCommand) string { return m.Key }
		_ = bus.SagaStartedBy(s, key, func(ctx context.Context, st *joinSaga, m joinCommand) error {
			if st.Key != "" {
				bus.CompleteSaga(ctx)
				return nil
			}
			st.Key = m.Key
			return bus.RequestTimeout(ctx, joinOverdue{}, time.Hour)
		})
		_ = bus.SagaTimeout(s, func(context.Context, *joinSaga, joinOverdue) error { return nil })
		_ = bus.Handle(b, func(_ context.Context, m joinCommand) error {
			if m.Fail {
				return bus.Unrecoverable(errors.New("fails after the saga completed"))
			}
			return nil
		})
	})
	receive(t, b, ns+"-start", joinCommand{Key: "k"})
	if n := storedRows(t, pool, store); n != 1 {
		t.Fatalf("%d scheduled rows after the start; want the timeout", n)
	}
	receive(t, b, ns+"-complete-fails", joinCommand{Key: "k", Fail: true})
	if n := storedRows(t, pool, store); n != 1 {
		t.Fatalf("%d scheduled rows after a failed completion; want the timeout kept", n)
	}
	receive(t, b, ns+"-complete", joinCommand{Key: "k"})
	if n := storedRows(t, pool, store); n != 0 {
		t.Errorf("%d scheduled rows after the completion committed; want the timeout cancelled", n)
	}
}

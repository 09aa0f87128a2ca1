package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

func envelopeTo(queue, id string) *bus.Envelope {
	return &bus.Envelope{ID: id, Type: "postgres_test.Leased", Kind: bus.KindCommand, Body: []byte(`{}`),
		ContentType: "application/json", Destination: queue, SentAt: time.Now().UTC()}
}

// receiveAll runs Receive on queue with h until the test ends.
func receiveAll(t *testing.T, tr bus.Transport, queue string, conc int, h bus.DeliveryHandler) {
	t.Helper()
	drivertest.ReceiveUntilEnd(t, tr, queue, conc, h)
}

// A handler that runs four times the lease keeps the message: the lease is
// extended while it runs, and a second consumer never sees it.
func TestTransportLongHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{Lease: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	queue := bustest.Namespace() + "-long"
	ctx := drivertest.Ctx(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	var deliveries, done atomic.Int64
	h := func(ctx context.Context, _ *bus.Envelope) error {
		deliveries.Add(1)
		select {
		case <-time.After(1200 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done.Add(1)
		return nil
	}
	receiveAll(t, tr, queue, 2, h)
	receiveAll(t, tr, queue, 2, h)
	if err := tr.Send(ctx, queue, envelopeTo(queue, "long-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return done.Load() == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := deliveries.Load(); n != 1 {
		t.Errorf("a handler four leases long was delivered %d times, want 1", n)
	}
}

// When another consumer takes the row (here: its lease token is changed
// behind the transport's back), the delivery's ctx is cancelled with
// ErrLeaseLost, and the transport neither acknowledges nor releases it.
func TestTransportLostLeaseCancelsTheDelivery(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{Lease: 300 * time.Millisecond})
	queue := bustest.Namespace() + "-lost"
	ctx := drivertest.Ctx(t, time.Minute)
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	receiveAll(t, tr, queue, 1, func(ctx context.Context, _ *bus.Envelope) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	if err := tr.Send(ctx, queue, envelopeTo(queue, "lost-1")); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := pool.Exec(ctx, `UPDATE `+tr.MessagesTable()+` SET lease_token = 42, available_at = now() + interval '1 hour' WHERE queue = $1`, queue); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, postgres.ErrLeaseLost) {
			t.Errorf("delivery ctx cause = %v, want ErrLeaseLost", err)
		}
	case <-ctx.Done():
		t.Fatal("the delivery ctx was not cancelled after its row was taken")
	}
	time.Sleep(200 * time.Millisecond)
	var token int64
	if err := pool.QueryRow(ctx, `SELECT lease_token FROM `+tr.MessagesTable()+` WHERE queue = $1`, queue).Scan(&token); err != nil || token != 42 {
		t.Errorf("the other consumer's row: token %d, %v; want it untouched (42)", token, err)
	}
}

func TestTransportOversizeIsRefusedBeforeStoring(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{MaxMessageSize: 10})
	env := envelopeTo("q", "big")
	env.Body = []byte(`{"too":"large"}`)
	var oe *postgres.OversizeError
	if err := tr.Send(t.Context(), "q", env); !errors.As(err, &oe) || !errors.Is(err, postgres.ErrMessageTooLarge) || oe.Size != len(env.Body) {
		t.Errorf("Send of an oversize body = %v, want an *OversizeError", err)
	}
	if err := tr.Send(t.Context(), "", envelopeTo("", "x")); !errors.Is(err, postgres.ErrInvalidName) {
		t.Errorf("Send to an empty queue name = %v, want ErrInvalidName", err)
	}
}

func TestTransportIdentityNamesDatabaseAndTables(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, "some_schema", postgres.TransportOptions{TablePrefix: "bus"})
	want := "postgres:" + pool.Config().ConnConfig.Database + "/some_schema.bus"
	if got := tr.Identity(); got != want {
		t.Errorf("Identity() = %q, want %q", got, want)
	}
}

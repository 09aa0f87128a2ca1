package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// TestCancelScheduledInHandlingsDoesNotExhaustThePool runs 40 outbox
// handlings, 4 at a time on a pool of 4 connections, each cancelling a
// scheduled message. A cancel that took a second connection while its
// handling holds one would wait for ever once 4 handlings hold the pool.
func TestCancelScheduledInHandlingsDoesNotExhaustThePool(t *testing.T) {
	t.Parallel()
	const n = 40
	pool := newPool(t, 4)
	store := newStore(t, pool, postgres.Options{DisableNotify: true})
	ns := bustest.Namespace()
	var mu sync.Mutex
	var failures []string
	b := bustest.StartBus(t, bus.Config{Endpoint: ns, Transport: bus.NewMemoryTransport(), Persistence: store,
		Concurrency: 4, Outbox: bus.OutboxConfig{Enabled: true}, Dispatcher: bus.DispatcherConfig{Disabled: true},
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m bustest.CancelOutboxReminder) error {
			ok, err := b.CancelScheduled(ctx, m.ID)
			if err != nil || !ok {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %v, %v", m.ID, ok, err))
				mu.Unlock()
			}
			return err
		})
	})
	ctx := ctxTimeout(t, 2*time.Minute)
	for i := range n {
		id := fmt.Sprintf("%s-r%d", ns, i)
		if err := b.Send(ctx, bustest.OutboxReminder{Key: id}, bus.To(ns+"-billing"), bus.DeliverAfter(time.Hour),
			bus.WithMessageID(id)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range n {
		if err := b.Send(ctx, bustest.CancelOutboxReminder{ID: fmt.Sprintf("%s-r%d", ns, i)}, bus.To(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for b.Metrics().Handled < n && time.Since(start) < time.Minute {
		time.Sleep(20 * time.Millisecond)
	}
	if got := b.Metrics().Handled; got != n {
		t.Fatalf("%d of %d handlings completed within a minute", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("cancels that failed or found nothing: %v", failures)
	}
	if rows := storedRows(t, pool, store); rows != 0 {
		t.Errorf("%d rows left; want every reminder cancelled", rows)
	}
}

// startOnPool starts a bus on a store on a pool of maxConns connections,
// with the outbox on and the given concurrency, and returns Start's error.
func startOnPool(t *testing.T, maxConns int32, concurrency int, tr func(*pgxpool.Pool) bus.Transport) error {
	t.Helper()
	pool := newPool(t, maxConns)
	store := newStore(t, pool, postgres.Options{})
	transport := bus.Transport(bus.NewMemoryTransport())
	if tr != nil {
		transport = tr(pool)
	}
	b, err := bus.New(bus.Config{Endpoint: bustest.Namespace(), Transport: transport, Persistence: store,
		Concurrency: concurrency, Outbox: bus.OutboxConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(ctxTimeout(t, 10*time.Second)) })
	return b.Start(ctxTimeout(t, time.Minute))
}

// wantPoolRefusal checks that err is the *ConfigError of a pool too small
// for Concurrency, naming the numbers and the fix.
func wantPoolRefusal(t *testing.T, err error, parts ...string) {
	t.Helper()
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Concurrency" {
		t.Fatalf("Start = %v; want a *ConfigError on Concurrency", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Start's error %q does not say %q", err, p)
		}
	}
}

func TestStartRefusesAPoolTooSmallForConcurrency(t *testing.T) {
	t.Parallel()
	// 4 handlings hold 4 connections; the dispatcher and the store's
	// LISTEN connection need 2 more.
	wantPoolRefusal(t, startOnPool(t, 4, 4, nil), "MaxConns 4", "Concurrency 4", "6 in all", "at least 6", "Concurrency to 2")
}

func TestStartAcceptsAPoolThatFitsConcurrency(t *testing.T) {
	t.Parallel()
	if err := startOnPool(t, 6, 4, nil); err != nil {
		t.Fatalf("Start with 4 handlings on a pool of 6: %v", err)
	}
}

func TestStartCountsATransportSharingThePool(t *testing.T) {
	t.Parallel()
	// The PostgreSQL transport on the same pool adds its LISTEN connection
	// and one for its claims and acknowledgements: 8 in all.
	onPool := func(pool *pgxpool.Pool) bus.Transport {
		tr, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: freshSchema(t, pool)})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	wantPoolRefusal(t, startOnPool(t, 7, 4, onPool), "MaxConns 7", "8 in all", "at least 8", "Concurrency to 3")
	if err := startOnPool(t, 8, 4, onPool); err != nil {
		t.Fatalf("Start with 4 handlings and the transport on a pool of 8: %v", err)
	}
}

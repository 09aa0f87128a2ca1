package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// TestForeignRowGoesToErrorQueueWithReason: a row another program inserted
// into the transport's table with plain SQL, whose envelope column is not
// an envelope, reaches the error queue once, with its ID, its body and the
// reason it could not be read; its queue is left empty and no handler ran.
func TestForeignRowGoesToErrorQueueWithReason(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	tr := newTransport(t, pool, schema, postgres.TransportOptions{PollInterval: 100 * time.Millisecond})
	handled := make(chan struct{}, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: "in", ErrorQueue: "in-error", Transport: tr},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, bustest.Ping) error { handled <- struct{}{}; return nil })
		})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := schema + "." + postgres.DefaultTablePrefix + "_messages"
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (queue, message_id, message_type, body, envelope)
		VALUES ('in', 'legacy-1', 'legacy.Thing', '\x7b7d00'::bytea, convert_to('{"type":"legacy"}', 'UTF8'))`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []*bus.Envelope
	)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tr.Receive(rctx, "in-error", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, env)
			return nil
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Receive: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second copy would arrive about now
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the error queue got %d messages, want 1", len(got))
	}
	env := got[0]
	if env.ID != "legacy-1" || string(env.Body) != "{}\x00" {
		t.Errorf("error queue got ID %q body %q", env.ID, env.Body)
	}
	if reason := env.Header(bus.HeaderFailureReason); !strings.HasPrefix(reason, "postgres: ") || !strings.Contains(reason, "envelope") ||
		env.Header(bus.HeaderFailureKind) != "poison" {
		t.Errorf("failure reason %q kind %q", reason, env.Header(bus.HeaderFailureKind))
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE queue = 'in'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("queue in holds %d rows (%v), want 0", left, err)
	}
	select {
	case <-handled:
		t.Error("a handler ran for the foreign row")
	default:
	}
	if m := b.Metrics(); m.MovedToError != 1 {
		t.Errorf("moved to error %d, want 1", m.MovedToError)
	}
}

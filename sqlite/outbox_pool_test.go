package sqlite_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// TestCancelScheduledInHandlingReturnsAtOnce cancels a scheduled message
// from an outbox handling. The handling holds the store's only connection:
// a cancel that asked the pool for one would wait until HandlerTimeout.
func TestCancelScheduledInHandlingReturnsAtOnce(t *testing.T) {
	t.Parallel()
	p := openAt(t, filepath.Join(t.TempDir(), "cancel.db"), sqlite.Options{})
	ns := bustest.Namespace()
	type result struct {
		ok   bool
		err  error
		took time.Duration
	}
	results := make(chan result, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: ns, Transport: bus.NewMemoryTransport(), Persistence: p,
		Outbox: bus.OutboxConfig{Enabled: true}, HandlerTimeout: 30 * time.Second,
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m bustest.CancelOutboxReminder) error {
			start := time.Now()
			ok, err := b.CancelScheduled(ctx, m.ID)
			results <- result{ok, err, time.Since(start)}
			return err
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	id := ns + "-reminder"
	if err := b.Send(ctx, bustest.OutboxReminder{Key: id}, bus.To(ns+"-billing"), bus.DeliverAfter(time.Hour),
		bus.WithMessageID(id)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, bustest.CancelOutboxReminder{ID: id}, bus.To(ns)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-results:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	if r.err != nil || !r.ok || r.took > 5*time.Second {
		t.Fatalf("CancelScheduled in the handling = %v, %v after %v; want true, nil at once", r.ok, r.err, r.took)
	}
	for b.Metrics().Handled < 1 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := p.Len(ctx); err != nil || n != 0 {
		t.Errorf("%d rows left (%v); want the reminder cancelled", n, err)
	}
}

// TestStartWarnsThatOutboxHandlingsTakeTurns starts outbox buses on the
// store's single connection: with Concurrency above 1, Start logs one
// warning naming the numbers, since handlings take turns instead of
// running at once; with Concurrency 1 it logs none.
func TestStartWarnsThatOutboxHandlingsTakeTurns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		concurrency int
		warnings    int
	}{{4, 1}, {1, 0}} {
		var logs bustest.LogBuffer
		p := openAt(t, filepath.Join(t.TempDir(), "pool.db"), sqlite.Options{})
		bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace(), Transport: bus.NewMemoryTransport(), Persistence: p,
			Concurrency: c.concurrency, Outbox: bus.OutboxConfig{Enabled: true},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}, nil)
		var warnings []string
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "MaxConns") {
				warnings = append(warnings, line)
			}
		}
		if len(warnings) != c.warnings {
			t.Fatalf("Concurrency %d: warnings %q; want %d", c.concurrency, warnings, c.warnings)
		}
		if c.warnings > 0 && (!strings.Contains(warnings[0], "Concurrency 4") || !strings.Contains(warnings[0], "MaxConns 1")) {
			t.Errorf("the warning %q does not name Concurrency 4 and MaxConns 1", warnings[0])
		}
	}
}

package sqlite_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// recTick is the message of the recurring test.
type recTick struct{ At time.Time }

// Two buses, each with a handle of its own on one database file (two
// processes, as far as SQLite can tell), declare the same schedule: every
// tick is delivered once, none early.
func TestRecurringTwoHandlesDeliverEachTickOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "postbus.db")
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[time.Time]int{}
	early := 0
	for range 2 {
		p, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() }) // after the bus stopped: cleanups run last first
		bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Persistence: p,
			Dispatcher: bus.DispatcherConfig{PollInterval: 200 * time.Millisecond}}, func(b *bus.Bus) {
			if err := bus.Handle(b, func(ctx context.Context, m recTick) error {
				mu.Lock()
				defer mu.Unlock()
				seen[m.At]++
				if time.Now().Before(m.At) {
					early++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := b.AddRecurring(bus.Recurring{Name: "tick", Schedule: bus.Every(200 * time.Millisecond),
				Message: func(tick time.Time) any { return recTick{At: tick} }, Options: []bus.Option{bus.To("worker")}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	end := time.Now()
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	if early > 0 {
		t.Errorf("%d ticks delivered early", early)
	}
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %v delivered %d times", tick, n)
		}
	}
	for tick := start.Add(time.Second).Truncate(200 * time.Millisecond); tick.Before(end); tick = tick.Add(200 * time.Millisecond) {
		if seen[tick.UTC()] == 0 {
			t.Errorf("tick %v never delivered (got %d ticks)", tick, len(seen))
		}
	}
}

// placeOrder is the message handled in an outbox handling.
type placeOrder struct{ ID string }

// A recurring call from an outbox handling cannot join its transaction:
// it fails at once, saying so, rather than waiting for the connection the
// transaction holds.
func TestRecurringCallInOutboxHandlingFailsAtOnce(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	errs := make(chan error, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: "orders", Persistence: p, Outbox: bus.OutboxConfig{Enabled: true}}, func(nb *bus.Bus) {
		if err := bus.Handle(nb, func(ctx context.Context, m placeOrder) error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			errs <- nb.PauseRecurring(cctx, "tick")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := nb.AddRecurring(bus.Recurring{Name: "tick", Schedule: bus.Every(time.Hour),
			Message: func(tick time.Time) any { return recTick{At: tick} }, Options: []bus.Option{bus.To("orders")}}); err != nil {
			t.Fatal(err)
		}
	})
	if err := b.Send(t.Context(), placeOrder{ID: "1"}, bus.To("orders")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, bus.ErrCannotJoinTx) {
			t.Fatalf("PauseRecurring in an outbox handling = %v, want ErrCannotJoinTx", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
}

// A recurring table made by an earlier version, before the liveness mark
// or before the columns of runtime schedules, gets its columns and the
// index of due runtime records from Setup (twice changes nothing more),
// and its records keep working: they load as declared schedules, advance,
// and become runtime ones when declared with a Spec.
func TestRecurringSetupMigratesTheLivenessMark(t *testing.T) {
	t.Parallel()
	for _, layout := range []struct{ name, columns string }{
		{"before the liveness mark", ""},
		{"before runtime schedules", ", alive_until INTEGER NOT NULL DEFAULT 0"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			t.Parallel()
			testRecurringSetupMigrates(t, layout.columns)
		})
	}
}

func testRecurringSetupMigrates(t *testing.T, extra string) {
	p, err := sqlite.Open(filepath.Join(t.TempDir(), "old.db"), sqlite.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	last := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := p.DB().ExecContext(ctx, `CREATE TABLE outgoing_messages_recurring (name TEXT NOT NULL PRIMARY KEY,
	fingerprint TEXT NOT NULL, schedule TEXT NOT NULL, generation INTEGER NOT NULL, paused INTEGER NOT NULL DEFAULT 0,
	last_tick INTEGER NOT NULL DEFAULT 0, ticks TEXT NOT NULL DEFAULT '[]', updated_at INTEGER NOT NULL`+extra+`);
INSERT INTO outgoing_messages_recurring (name, fingerprint, schedule, generation, last_tick, updated_at)
	VALUES ('old', 'fp', 'every 1h0m0s', 1, ?, 0)`, last.UnixNano()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Setup(ctx); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}
	var index int
	if err := p.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'outgoing_messages_recurring_due_idx'`).Scan(&index); err != nil || index != 1 {
		t.Fatalf("the index of due runtime records after Setup: %d, %v", index, err)
	}
	rec, ok, err := p.LoadRecurring(ctx, "old")
	if err != nil || !ok || !rec.Last.Equal(last) || !rec.Alive.IsZero() || rec.Spec != nil || !rec.Due.IsZero() || rec.Runs != 0 || rec.Skipped != 0 {
		t.Fatalf("record made before the columns = %+v, %v, %v; want Last %v, no mark, no Spec, Due, Runs or Skipped", rec, ok, err, last)
	}
	alive := last.Add(time.Hour)
	if ok, err := p.AdvanceRecurring(ctx, bus.RecurringAdvance{Name: "old", Generation: 1, Fingerprint: "fp", From: last, Last: last, Alive: alive,
		Runs: 2, Skipped: 1}); err != nil || !ok {
		t.Fatalf("AdvanceRecurring = %v, %v", ok, err)
	}
	if rec, _, _ := p.LoadRecurring(ctx, "old"); !rec.Alive.Equal(alive) || rec.Runs != 2 || rec.Skipped != 1 {
		t.Fatalf("record after an advance = %+v, want mark %v, Runs 2, Skipped 1", rec, alive)
	}
	// Declared again as a runtime schedule, it is claimed when due.
	due := time.Now().Truncate(time.Millisecond)
	if rec, changed, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: "old", Fingerprint: "fp2", Schedule: "@every 1h",
		Spec: []byte(`{}`), Due: due}); err != nil || !changed || rec.Generation != 2 || rec.Runs != 2 {
		t.Fatalf("DeclareRecurring with a Spec = %+v, %v, %v", rec, changed, err)
	}
	recs, err := p.ClaimDueRecurring(ctx, due, 10, time.Minute)
	if err != nil || len(recs) != 1 || recs[0].Name != "old" || !recs[0].Due.Equal(due) {
		t.Fatalf("ClaimDueRecurring = %+v, %v; want the migrated record", recs, err)
	}
}

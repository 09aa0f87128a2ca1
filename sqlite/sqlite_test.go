package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/sqlite"
)

func TestMain(m *testing.M) {
	storetest.Main(m, storetest.Setup{
		Children: []func(){func() { runClaimerIfAsked() }, func() { runOutboxChildIfAsked() }},
		Leaks:    func() error { return goleak.Find() },
	})
}

// openTemp opens a store on a fresh file in t.TempDir, set up, and closes
// it when the test ends.
func openTemp(t testing.TB) *sqlite.Persistence {
	t.Helper()
	p, err := sqlite.Open(filepath.Join(t.TempDir(), "postbus.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := p.Setup(context.Background()); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return p
}

// TestConformance runs every store suite: a store of a file of its own
// per case.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Conformance(t, storetest.Suites{
		Store: func(t *testing.T) bus.ScheduledStore { return openTemp(t) },
		Sagas: true, Recurring: true, Browser: true, Failed: true,
		Outbox: outboxHarness,
		CallerTx: &bustest.CallerTxHarness{
			NewStore: func(t *testing.T) bus.Persistence { return openTemp(t) },
			Begin: func(t *testing.T, ctx context.Context, p bus.Persistence) (context.Context, func() error, func() error) {
				tx, err := p.(*sqlite.Persistence).DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return sqlite.WithTx(ctx, tx), tx.Commit, tx.Rollback
			},
		},
	})
}

func TestSetupIsIdempotent(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	for range 3 {
		if err := p.Setup(t.Context()); err != nil {
			t.Fatalf("Setup again: %v", err)
		}
	}
	if !p.Durable() {
		t.Error("Durable() = false for a file, want true")
	}
}

func TestRowsSurviveReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "reopen.db")
	ctx := t.Context()
	due := time.Now().Add(-time.Second)
	env := bus.MarshalEnvelope(&bus.Envelope{ID: "keep", Type: "T", Kind: bus.KindEvent, DueAt: due})
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "keep", Kind: bus.KindEvent, Envelope: env, DueAt: due, Transport: "t"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p2, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := p2.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := p2.ClaimDueOutgoing(ctx, "t", time.Now(), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "keep" || got[0].Kind != bus.KindEvent || string(got[0].Envelope) != string(env) {
		t.Fatalf("after reopen claimed %+v, %v; want the stored row", got, err)
	}
	if !got[0].DueAt.Equal(due) {
		t.Errorf("DueAt = %v, want %v", got[0].DueAt, due)
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		path  string
		opts  sqlite.Options
		field string
	}{
		{"", sqlite.Options{}, "path"},
		{filepath.Join(dir, "a?b.db"), sqlite.Options{}, "path"},
		{"file:x.db", sqlite.Options{}, "path"},
		{filepath.Join(dir, "ok.db"), sqlite.Options{Table: "bad name; DROP"}, "Table"},
		{filepath.Join(dir, "ok.db"), sqlite.Options{BusyTimeout: -time.Second}, "BusyTimeout"},
	}
	for _, c := range cases {
		p, err := sqlite.Open(c.path, c.opts)
		var oe *sqlite.OptionsError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, sqlite.ErrInvalidOptions) {
			t.Errorf("Open(%q, %+v) = %v; want an *OptionsError on %s", c.path, c.opts, err, c.field)
		}
		if p != nil {
			p.Close()
		}
	}
}

func TestMissingDirectoryFailsAtOpen(t *testing.T) {
	t.Parallel()
	p, err := sqlite.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), sqlite.Options{})
	if err == nil {
		p.Close()
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestCustomTableAndMemory(t *testing.T) {
	t.Parallel()
	p, err := sqlite.Open(":memory:", sqlite.Options{Table: "delayed"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Durable() {
		t.Error("Durable() = true for :memory:")
	}
	if err := p.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := p.DB().QueryRowContext(t.Context(), "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='delayed' AND name NOT LIKE 'sqlite_%'").Scan(&name); err != nil || name != "delayed_claim_idx" {
		t.Fatalf("index = %q, %v; want delayed_claim_idx", name, err)
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.ClaimDueOutgoing(ctx, "t", time.Now(), 10, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("claim with a canceled ctx = %v, want context.Canceled", err)
	}
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "x", Kind: bus.KindCommand, Envelope: []byte("x")}}); !errors.Is(err, context.Canceled) {
		t.Errorf("store with a canceled ctx = %v, want context.Canceled", err)
	}
}

// BenchmarkConformance runs the shared store benchmark against SQLite.
func BenchmarkConformance(b *testing.B) {
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore { return openTemp(b) })
}

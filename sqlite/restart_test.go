package sqlite_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

type restartReminder struct{ N int }

// TestRestartDeliversEveryScheduledMessageOnce schedules 1,000 messages due
// in 2 s through a bus, stops it before they are due, closes the file, and
// starts a new bus on a new handle to the same file after they fell due:
// every message arrives exactly once, none before its due time. The
// in-memory transport is shared by both lives: it stands for the broker,
// which outlives the process.
//
// Not parallel: it runs alone (before the parallel tests), so scheduling
// stays inside the 2 s even under -race on a small machine. Should it still
// overrun, the first bus dispatches what fell due before it stopped; the
// test then checks exactly-once across both lives and says so in the log.
func TestRestartDeliversEveryScheduledMessageOnce(t *testing.T) {
	const n, endpoint = 1000, "restart"
	path := filepath.Join(t.TempDir(), "restart.db")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// First life: schedule, then stop before anything is due.
	var early atomic.Int64
	transport := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[string]int{}
	var firstEarly time.Duration
	record := func(ctx context.Context) {
		env := bus.IncomingMessage(ctx)
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		seen[env.ID]++
		if now.Before(env.DueAt) && firstEarly == 0 {
			firstEarly = env.DueAt.Sub(now)
		}
	}
	p1, err := sqlite.Open(path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	b1 := newRestartBus(t, endpoint, transport, p1, logger, func(ctx context.Context, _ restartReminder) error {
		early.Add(1)
		record(ctx)
		return nil
	})
	if err := b1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				err := b1.Send(ctx, restartReminder{N: i}, bus.DeliverAt(due), bus.WithMessageID(fmt.Sprintf("r-%04d", i)))
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("scheduled %d in %v", n, 2*time.Second-time.Until(due))
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
	if err := b1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	overran := time.Now().After(due)
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	carried, err := countRows(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if overran {
		t.Logf("scheduling overran the due time: the first bus handled %d, %d rows carried over the restart", early.Load(), carried)
	} else if got := early.Load(); got != 0 || carried != n {
		t.Fatalf("first bus handled %d messages and left %d rows; want 0 and %d (nothing was due)", got, carried, n)
	}
	if carried == 0 {
		t.Fatal("no row carried over the restart; the test proves nothing")
	}

	// Down time: the messages fall due while no bus runs. Waiting for a
	// fixed instant is the point of the test, not a guess.
	time.Sleep(time.Until(due) + 200*time.Millisecond)

	// Second life: a new handle on the file, a new bus.
	p2, err := sqlite.Open(path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	b2 := newRestartBus(t, endpoint, transport, p2, logger, func(ctx context.Context, _ restartReminder) error {
		record(ctx)
		return nil
	})
	restarted := time.Now()
	if err := b2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = b2.Stop(context.Background())
		}
	}()
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		left, err := p2.Len(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got == n && left == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after restart: %d of %d delivered, %d rows left", got, n, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(restarted)
	if err := b2.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if id := fmt.Sprintf("r-%04d", i); seen[id] != 1 {
			t.Errorf("message %s delivered %d times, want 1", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages delivered, want %d", len(seen), n)
	}
	if firstEarly != 0 {
		t.Errorf("a message was handled %v before its due time", firstEarly)
	}
	t.Logf("after restart the %d carried rows were delivered within %v", carried, elapsed.Round(time.Millisecond))
}

func newRestartBus(t *testing.T, endpoint string, tr bus.Transport, p *sqlite.Persistence, logger *slog.Logger, h func(context.Context, restartReminder) error) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: tr, Persistence: p, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[restartReminder](b, endpoint); err != nil {
		t.Fatal(err)
	}
	if err := bus.Handle(b, h); err != nil {
		t.Fatal(err)
	}
	return b
}

// countRows looks at the file through a handle of its own.
func countRows(ctx context.Context, path string) (int, error) {
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.Len(ctx)
}

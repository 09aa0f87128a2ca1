package sqlite_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// TestWatchDueSeesOtherConnections: a row stored through another handle on
// the file (another process, as far as SQLite can tell) wakes the watcher
// with its due time; the watcher's own stores do not, and neither do rows
// of a transport the watcher's dispatcher does not claim for.
func TestWatchDueSeesOtherConnections(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "watch.db")
	watcher, err := sqlite.Open(path, sqlite.Options{WatchInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	other, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := watcher.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	const mine, foreign = "mine", "foreign"
	// The watcher's dispatcher claims for its transport, as a bus's does
	// before it sleeps.
	if _, err := watcher.ClaimDueOutgoing(ctx, mine, time.Now(), 10, time.Minute); err != nil {
		t.Fatal(err)
	}

	wakes := make(chan time.Time, 16)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- watcher.WatchDue(watchCtx, func(due time.Time) { wakes <- due }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("WatchDue returned %v, want nil after cancel", err)
		}
	}()

	own := time.Now().Add(time.Hour)
	if err := watcher.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "own", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: own, Transport: mine}}); err != nil {
		t.Fatal(err)
	}
	select {
	case due := <-wakes:
		t.Fatalf("woken (due %v) by this handle's own store", due)
	case <-time.After(300 * time.Millisecond): // 30 watch intervals
	}

	theirs := time.Now().Add(2 * time.Minute).Truncate(time.Microsecond)
	notMine := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	err = other.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "not-mine", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: notMine, Transport: foreign}})
	if err != nil {
		t.Fatal(err)
	}
	err = other.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "theirs", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: theirs, Transport: mine}})
	if err != nil {
		t.Fatal(err)
	}
	for woken := false; !woken; {
		select {
		case got := <-wakes:
			if got.Equal(notMine) {
				t.Fatalf("woken with the due time of another transport's row")
			}
			woken = got.Equal(theirs)
		case <-ctx.Done():
			t.Fatal("a store by another connection never woke the watcher with its due time")
		}
	}
	for _, id := range []string{"own", "theirs", "not-mine"} {
		if ok, err := other.CancelOutgoing(ctx, id); err != nil || !ok {
			t.Fatalf("CancelOutgoing(%s) = %v, %v", id, ok, err)
		}
	}
}

type crossProcessPing struct{}

// TestCrossProcessStoreWakesDispatcher: a dispatcher that polls only every
// minute delivers a message that another handle on the file scheduled 200 ms
// ahead within seconds, because WatchDue wakes it.
func TestCrossProcessStoreWakesDispatcher(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wake.db")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	transport := bus.NewMemoryTransport()

	pa, err := sqlite.Open(path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	var delivered atomic.Int64
	handled := make(chan time.Time, 1)
	a, err := bus.New(bus.Config{Endpoint: "wake", Transport: transport, Persistence: pa, Logger: logger,
		Dispatcher: bus.DispatcherConfig{PollInterval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(a, func(ctx context.Context, _ crossProcessPing) error {
		if delivered.Add(1) == 1 {
			handled <- time.Now()
		}
		return nil
	})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())

	pb, err := sqlite.Open(path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	b, err := bus.New(bus.Config{Endpoint: "wake-sender", Transport: transport, Persistence: pb, Logger: logger, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Route[crossProcessPing](b, "wake")
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())

	// Let a's dispatcher settle into its minute-long sleep first.
	time.Sleep(300 * time.Millisecond)
	due := time.Now().Add(200 * time.Millisecond)
	if err := b.Send(ctx, crossProcessPing{}, bus.DeliverAt(due)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-handled:
		if at.Before(due) {
			t.Errorf("handled %v before its due time", due.Sub(at))
		}
		if late := at.Sub(due); late > 10*time.Second {
			t.Errorf("handled %v late: the dispatcher was not woken", late)
		}
	case <-ctx.Done():
		t.Fatal("message never handled")
	}
}

// TestBusyTimeoutGivesAClearError: while another connection holds the write
// lock longer than the busy timeout, a claim fails with SQLite's "database
// is locked" error after about the timeout, and succeeds once it is free.
func TestBusyTimeoutGivesAClearError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	holder := openAt(t, path, sqlite.Options{})
	waiter := openAt(t, path, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	ctx := t.Context()

	conn, err := holder.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = waiter.ClaimDueOutgoing(ctx, "t", time.Now(), 10, time.Minute)
	waited := time.Since(start)
	if err == nil {
		t.Fatal("claim succeeded while another connection held the write lock")
	}
	t.Logf("claim under a held lock after %v: %v", waited.Round(time.Millisecond), err)
	if waited < 150*time.Millisecond {
		t.Errorf("claim gave up after %v, before the 200ms busy timeout", waited)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.ClaimDueOutgoing(ctx, "t", time.Now(), 10, time.Minute); err != nil {
		t.Errorf("claim after the lock was released: %v", err)
	}
}

func openAt(t *testing.T, path string, opts sqlite.Options) *sqlite.Persistence {
	t.Helper()
	p, err := sqlite.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := p.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p
}

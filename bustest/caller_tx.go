package bustest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// CallerTxHarness is what CallerTxTests needs of a persistence whose
// callers pass a transaction of their own in a ctx (bus.TxCarrier).
type CallerTxHarness struct {
	// NewStore returns a new, set-up, isolated persistence.
	NewStore func(t *testing.T) bus.Persistence
	// Begin opens a transaction of the caller's own on p and returns ctx
	// carrying it (postgres.WithTx, sqlite.WithTx), and its commit and
	// rollback.
	Begin func(t *testing.T, ctx context.Context, p bus.Persistence) (txCtx context.Context, commit, rollback func() error)
}

// CallerTxTests checks that every bus call made with a caller's
// transaction runs in it or is refused: Send and Publish store in it
// with the outbox off as with it on (nothing is sent when the caller
// rolls back), and the calls that cannot run in it (the recurring calls,
// ScheduledBacklog) fail at once with bus.ErrCannotJoinTx instead of
// running beside it or waiting for the connection it holds.
func CallerTxTests(t *testing.T, h CallerTxHarness) {
	t.Run("RecurringCallsAreRefused", func(t *testing.T) { t.Parallel(); testCallerTxRefused(t, h) })
	t.Run("SendWithTheOutboxOffRunsInIt", func(t *testing.T) { t.Parallel(); testCallerTxSend(t, h) })
}

// txReport is the message of the caller's-transaction cases.
type txReport struct{ N int }

func testCallerTxRefused(t *testing.T, h CallerTxHarness) {
	p := h.NewStore(t)
	ep := "tx-" + Namespace()
	b := StartBus(t, bus.Config{Endpoint: ep, Transport: bus.NewMemoryTransport(), Persistence: p}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, txReport) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
			Message: func(time.Time) any { return txReport{} }, Options: []bus.Option{bus.To(ep)}}); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txCtx, _, rollback := h.Begin(t, ctx, p)
	_, listErr := b.Recurrings(txCtx)
	_, backlogErr := b.ScheduledBacklog(txCtx)
	for call, err := range map[string]error{
		"TriggerRecurring": b.TriggerRecurring(txCtx, "hourly"),
		"PauseRecurring":   b.PauseRecurring(txCtx, "hourly"),
		"ResumeRecurring":  b.ResumeRecurring(txCtx, "hourly"),
		"Recurrings":       listErr,
		"ScheduledBacklog": backlogErr,
	} {
		if !errors.Is(err, bus.ErrCannotJoinTx) {
			t.Errorf("%s with the caller's transaction = %v, want ErrCannotJoinTx at once", call, err)
		}
	}
	if err := rollback(); err != nil {
		t.Fatal(err)
	}
	infos, err := b.Recurrings(ctx)
	if err != nil || len(infos) != 1 || infos[0].Paused {
		t.Fatalf("Recurrings after the refused calls = %+v, %v; want the schedule running", infos, err)
	}
}

func testCallerTxSend(t *testing.T, h CallerTxHarness) {
	p := h.NewStore(t)
	ep := "tx-" + Namespace()
	var got atomic.Int32
	b := StartBus(t, bus.Config{Endpoint: ep, Transport: bus.NewMemoryTransport(), Persistence: p,
		Dispatcher: bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, txReport) error { got.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(commit bool) {
		txCtx, commitTx, rollback := h.Begin(t, ctx, p)
		if err := b.Send(txCtx, txReport{N: 1}, bus.To(ep)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(txCtx, txReport{N: 2}, bus.To(ep), bus.DeliverAfter(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		end := rollback
		if commit {
			end = commitTx
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	send(false)
	time.Sleep(time.Second) // a message sent beside the transaction would arrive now
	if n := got.Load(); n != 0 {
		t.Fatalf("%d message(s) delivered after the caller rolled back, want 0", n)
	}
	send(true)
	poll.Eventually(t, 20*time.Second, func() bool { return got.Load() >= 2 }, "the 2 messages of the committed transaction")
	if n := got.Load(); n != 2 {
		t.Fatalf("%d message(s) delivered after the caller committed, want 2", n)
	}
}

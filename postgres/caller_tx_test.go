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

// Report is the message of the caller's-transaction tests.
type Report struct{ N int }

// Every bus call made with a caller's transaction (WithTx) runs in it or
// is refused: the recurring calls and ScheduledBacklog cannot, so they
// must not run beside it, where the caller's rollback would not undo them.
func TestCallerTxRecurringCallsAreRefused(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ep := bustest.Namespace()
	b := bustest.StartBus(t, bus.Config{Endpoint: ep, Transport: bus.NewMemoryTransport(), Persistence: store}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, Report) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
			Message: func(time.Time) any { return Report{} }, Options: []bus.Option{bus.To(ep)}}); err != nil {
			t.Fatal(err)
		}
	})
	ctx := ctxTimeout(t, time.Minute)
	tx, err := pool.Begin(ctx)
	if err != nil {
		serverUnavailable(t, err)
	}
	txCtx := postgres.WithTx(ctx, tx)
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
			t.Errorf("%s with WithTx = %v, want ErrCannotJoinTx", call, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	infos, err := b.Recurrings(ctx)
	if err != nil || len(infos) != 1 || infos[0].Paused {
		t.Fatalf("Recurrings after the refused calls = %+v, %v; want it running", infos, err)
	}
	if n := storedRows(t, pool, store); n != 2 {
		t.Errorf("%d rows stored, want the schedule's 2 ticks ahead and no triggered occurrence", n)
	}
}

// With the outbox off, Send with a caller's transaction stores its
// messages in it: nothing is sent when the caller rolls back.
func TestCallerTxSendWithTheOutboxOffRunsInIt(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ep := bustest.Namespace()
	var got atomic.Int32
	b := bustest.StartBus(t, bus.Config{Endpoint: ep, Transport: bus.NewMemoryTransport(), Persistence: store,
		Dispatcher: bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, Report) error { got.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx := ctxTimeout(t, time.Minute)
	send := func(commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			serverUnavailable(t, err)
		}
		txCtx := postgres.WithTx(ctx, tx)
		if err := b.Send(txCtx, Report{N: 1}, bus.To(ep)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(txCtx, Report{N: 2}, bus.To(ep), bus.DeliverAfter(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	send(false)
	time.Sleep(time.Second) // a message sent beside the transaction would arrive now
	if n := got.Load(); n != 0 {
		t.Fatalf("%d message(s) delivered after the caller rolled back, want 0", n)
	}
	send(true)
	deadline := time.Now().Add(20 * time.Second)
	for got.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("%d message(s) delivered after the caller committed, want 2", n)
	}
}

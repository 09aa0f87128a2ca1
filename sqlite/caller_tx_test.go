package sqlite_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// Report is the message of the caller's-transaction tests.
type Report struct{ N int }

// The bus calls that cannot run in the caller's transaction refuse it at
// once: run beside it, each would wait for the one connection it holds.
func TestCallerTxRecurringCallsAreRefusedInsteadOfWaiting(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	b := bustest.StartBus(t, bus.Config{Endpoint: "reports", Transport: bus.NewMemoryTransport(), Persistence: p}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, Report) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
			Message: func(time.Time) any { return Report{} }, Options: []bus.Option{bus.To("reports")}}); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tx, err := p.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	txCtx := sqlite.WithTx(ctx, tx)
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
			t.Errorf("%s with WithTx = %v, want ErrCannotJoinTx at once", call, err)
		}
	}
}

// With the outbox off, Send with the caller's transaction stores in it:
// nothing is sent when the caller rolls back.
func TestCallerTxSendWithTheOutboxOffRunsInIt(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	var got atomic.Int32
	b := bustest.StartBus(t, bus.Config{Endpoint: "reports", Transport: bus.NewMemoryTransport(), Persistence: p,
		Dispatcher: bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(context.Context, Report) error { got.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	send := func(commit bool) {
		tx, err := p.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txCtx := sqlite.WithTx(ctx, tx)
		if err := b.Send(txCtx, Report{N: 1}, bus.To("reports")); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(txCtx, Report{N: 2}, bus.To("reports"), bus.DeliverAfter(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
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

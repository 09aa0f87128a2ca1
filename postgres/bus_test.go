package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

type reminder struct{ Text string }

func (reminder) MessageName() string { return "postgres_test.Reminder" }

// TestBusInstancesWakeEachOther runs the core bus on the store: a send-only
// instance schedules a message 300 ms ahead on its own pool, and a second
// instance, whose dispatcher would otherwise sleep for its 30 s poll
// interval, is woken by NOTIFY and delivers it on time, never early.
func TestBusInstancesWakeEachOther(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	ctx := ctxTimeout(t, time.Minute)
	quiet := slog.New(slog.DiscardHandler)
	transport := bus.NewMemoryTransport()

	receiverStore, err := postgres.New(newPool(t, 6), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := bus.New(bus.Config{Endpoint: "reminders", Transport: transport, Persistence: receiverStore,
		Logger: quiet, Dispatcher: bus.DispatcherConfig{PollInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	type arrival struct {
		at  time.Time
		due time.Time
	}
	got := make(chan arrival, 10)
	if err := bus.Handle(receiver, func(ctx context.Context, m reminder) error {
		got <- arrival{at: time.Now(), due: bus.IncomingMessage(ctx).DueAt}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := receiver.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = receiver.Stop(context.Background()) })

	senderStore, err := postgres.New(newPool(t, 4), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	sender, err := bus.New(bus.Config{Endpoint: "scheduler", Transport: transport, Persistence: senderStore,
		Logger: quiet, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[reminder](sender, "reminders"); err != nil {
		t.Fatal(err)
	}
	if err := sender.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sender.Stop(context.Background()) })
	// Let the receiver's dispatcher finish its first look and go to sleep,
	// and its LISTEN session start, before scheduling.
	waitFor(t, func() bool {
		var n int
		_ = testPool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			`LISTEN "`+receiverStore.Channel()+`"`).Scan(&n)
		return n > 0
	})

	sent := time.Now()
	if err := sender.Send(ctx, reminder{Text: "soon"}, bus.DeliverAfter(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		late := a.at.Sub(a.due)
		t.Logf("delivered %v after sending, %v after its due time", a.at.Sub(sent).Round(time.Millisecond), late.Round(time.Millisecond))
		if late < 0 {
			t.Errorf("delivered %v early", -late)
		}
		if late > 5*time.Second {
			t.Errorf("delivered %v late: the receiver was not woken by the notification", late)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not delivered within 20s: the receiver was not woken (its poll interval is 30s)")
	}
	waitFor(t, func() bool { _, ok, err := receiverStore.NextDueOutgoing(ctx, "memory"); return err == nil && !ok })
}

// TestBusPollsWithNotifyDisabled is the PgBouncer set-up: no LISTEN, and
// the bus still delivers a delayed message on time (its own store wakes its
// dispatcher; other instances would find it by polling), never early.
func TestBusPollsWithNotifyDisabled(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{DisableNotify: true})
	b, err := bus.New(bus.Config{Endpoint: "polled", Persistence: store, Logger: slog.New(slog.DiscardHandler),
		Dispatcher: bus.DispatcherConfig{PollInterval: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	var due time.Time
	if err := bus.Handle(b, func(ctx context.Context, m reminder) error {
		due = bus.IncomingMessage(ctx).DueAt
		got <- time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[reminder](b, "polled"); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, time.Minute)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	if err := b.Send(ctx, reminder{Text: "later"}, bus.DeliverAfter(700*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if late := at.Sub(due); late < 0 || late > 5*time.Second {
			t.Errorf("delivered %v after its due time; want within [0, 5s)", late)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not delivered within 20s by polling")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 15s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

package mysql_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mysql"
)

// wakeCmd is the message of the wake-up tests.
type wakeCmd struct{ N int }

// A row that another process stores, due before the receiving bus's next
// poll, is delivered at its due time plus about one WatchInterval, not at
// the poll: the receiving bus polls every 30 s, the rows fall due 300 ms
// after they are stored, and each must arrive within 5 s of its due time.
// The sender is another *sql.DB and another Persistence, as another
// process would have; it runs no dispatcher.
func TestRowsStoredElsewhereWakeTheDispatcher(t *testing.T) {
	t.Parallel()
	table := freshTable()
	receiverDB, senderDB := newDB(t, 8), newDB(t, 4)
	receiver := newStore(t, receiverDB, mysql.Options{Table: table})
	sender, err := mysql.New(senderDB, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	var lateness []time.Duration
	got := make(chan struct{}, 16)
	b := bustest.StartBus(t, bus.Config{Endpoint: "wake-" + table, Transport: tr, Persistence: receiver,
		Dispatcher: bus.DispatcherConfig{PollInterval: 30 * time.Second}}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(ctx context.Context, m wakeCmd) error {
			mu.Lock()
			lateness = append(lateness, time.Since(bus.IncomingMessage(ctx).DueAt))
			mu.Unlock()
			got <- struct{}{}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	s, err := bus.New(bus.Config{Endpoint: "wake-sender-" + table, Transport: tr, Persistence: sender, SendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[wakeCmd](s, b.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	time.Sleep(time.Second) // the receiver's dispatcher has claimed once: its watch knows the transport
	const n = 5
	for i := range n {
		if err := s.Send(t.Context(), wakeCmd{N: i}, bus.DeliverAfter(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(5*time.Second + 300*time.Millisecond):
			t.Fatalf("message %d not delivered within 5 s of its due time (the receiver polls every 30 s)", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lateness)
	t.Logf("lateness of %d messages stored by another process: min %v, median %v, max %v (WatchInterval %v)",
		n, lateness[0].Round(time.Millisecond), lateness[n/2].Round(time.Millisecond), lateness[n-1].Round(time.Millisecond), mysql.DefaultWatchInterval)
}

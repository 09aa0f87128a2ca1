package mongodb_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

type remind struct{ N int }

// A bus on the MongoDB store delivers delayed messages once each, never
// before they are due, and leaves the store empty.
func TestBusDeliversDelayedMessages(t *testing.T) {
	t.Parallel()
	store := newStore(t, testEnv.client)
	b, err := bus.New(bus.Config{Endpoint: "mongo-e2e", Persistence: store,
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var (
		mu   sync.Mutex
		got  = map[int]int{}
		late = map[int]time.Time{}
		done = make(chan struct{})
	)
	dueAt := map[int]time.Time{}
	err = bus.Handle(b, func(ctx context.Context, m remind) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.N]++
		late[m.N] = time.Now()
		if len(got) == n {
			close(done)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[remind](b, "mongo-e2e"); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		d := 300*time.Millisecond + time.Duration(i)*20*time.Millisecond
		dueAt[i] = start.Add(d)
		if err := b.Send(ctx, remind{N: i}, bus.DeliverAfter(d)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("delayed messages not all delivered within a minute")
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if got[i] != 1 {
			t.Errorf("message %d delivered %d times", i, got[i])
		}
		if late[i].Before(dueAt[i]) {
			t.Errorf("message %d delivered %v early", i, dueAt[i].Sub(late[i]))
		}
	}
	assertNoDocuments(t, store)
}

package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

type remind struct{ N int }

type tick struct{}

// A bus on Redis alone (the Redis transport and the Redis persistence)
// delivers delayed messages once each, none before it is due, and runs a
// recurring schedule, once per tick.
func TestBusOnRedisAlone(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	tr := mustNew(t, rdb, namespace(t, rdb))
	store := newPersistence(t, rdb, redis.PersistenceOptions{})
	endpoint := drivertest.Unique("redis-alone-")
	b, err := bus.New(bus.Config{Endpoint: endpoint, Transport: tr, Persistence: store, Logger: drivertest.Logger(),
		Dispatcher: bus.DispatcherConfig{PollInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var (
		mu    sync.Mutex
		got   = map[int]int{}
		at    = map[int]time.Time{}
		ticks = map[string]int{}
		done  = make(chan struct{})
	)
	if err := bus.Handle(b, func(ctx context.Context, m remind) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.N]++
		at[m.N] = time.Now()
		if len(got) == n && got[m.N] == 1 {
			close(done)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ticked := make(chan struct{}, 16)
	if err := bus.Handle(b, func(ctx context.Context, _ tick) error {
		mu.Lock()
		ticks[bus.IncomingMessage(ctx).Header(bus.HeaderRecurringTick)]++
		mu.Unlock()
		ticked <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[remind](b, endpoint); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRecurring(bus.Recurring{Name: endpoint + "-tick", Schedule: bus.Every(time.Second),
		Message: func(time.Time) any { return tick{} }, Options: []bus.Option{bus.To(endpoint)}}); err != nil {
		t.Fatal(err)
	}
	ctx := drivertest.Ctx(t, 2*time.Minute)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	due := map[int]time.Time{}
	for i := range n {
		d := 300*time.Millisecond + time.Duration(i)*20*time.Millisecond
		due[i] = start.Add(d)
		if err := b.Send(ctx, remind{N: i}, bus.DeliverAfter(d)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("delayed messages not all delivered within a minute")
	}
	for range 2 {
		select {
		case <-ticked:
		case <-time.After(30 * time.Second):
			t.Fatal("the recurring schedule did not tick twice within 30 s")
		}
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
		if at[i].Before(due[i]) {
			t.Errorf("message %d delivered %v early", i, due[i].Sub(at[i]))
		}
	}
	for tk, k := range ticks {
		if k != 1 {
			t.Errorf("tick %s delivered %d times", tk, k)
		}
	}
}

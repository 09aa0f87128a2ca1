package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

func TestRecurringStoreConformance(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore { return newStore(t, pool, postgres.Options{}) })
}

// recTick is the message of the recurring tests.
type recTick struct{ At time.Time }

func (recTick) MessageName() string { return "postgres_test.RecTick" }

// Three buses, each with a Persistence of its own on one schema (three
// processes, as far as the database can tell), declare the same schedule:
// every tick is delivered once, none early, with no leader.
func TestRecurringThreeBusesDeliverEachTickOnce(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[time.Time]int{}
	var early []string
	for range 3 {
		store, err := postgres.New(newPool(t, 4), postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Persistence: store,
			Dispatcher: bus.DispatcherConfig{PollInterval: 200 * time.Millisecond}}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, func(ctx context.Context, m recTick) error {
				mu.Lock()
				defer mu.Unlock()
				seen[m.At]++
				if now := time.Now(); now.Before(m.At) {
					early = append(early, fmt.Sprintf("%v at %v", m.At, now))
				}
				return nil
			}))
			mustDo(t, b.AddRecurring(bus.Recurring{Name: "tick", Schedule: bus.Every(200 * time.Millisecond),
				Message: func(tick time.Time) any { return recTick{At: tick} }, Options: []bus.Option{bus.To("worker")}}))
		})
	}
	start := time.Now()
	time.Sleep(3 * time.Second)
	end := time.Now()
	time.Sleep(time.Second) // the ticks due by end arrive
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("delivered early: %v", early)
	}
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %v delivered %d times", tick, n)
		}
	}
	// Every tick between the first second (the buses started) and end arrived.
	for tick := start.Add(time.Second).Truncate(200 * time.Millisecond); tick.Before(end); tick = tick.Add(200 * time.Millisecond) {
		if seen[tick.UTC()] == 0 {
			t.Errorf("tick %v never delivered (got %d ticks)", tick, len(seen))
		}
	}
}

// The recurring table shown in the guide is the one Setup creates.
func TestRecurringGuideShowsTheTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/guide/recurring.md")
	if err != nil {
		t.Fatal(err)
	}
	ddl := postgres.Migrations()[len(postgres.Migrations())-1]
	if !strings.Contains(ddl, "outgoing_messages_recurring") || !strings.Contains(string(doc), ddl+";") {
		t.Errorf("docs/guide/recurring.md does not show the recurring table as Setup creates it:\n%s;", ddl)
	}
}

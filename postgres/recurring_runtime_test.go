package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

var _ bus.RecurringRuntimeStore = (*postgres.Persistence)(nil)

// A schedule made at runtime by a send-only bus is run by the two
// dispatchers on the store, each with a Persistence of its own on one
// schema: over five seconds every tick arrives once, none before its time.
func TestRuntimeRecurringEachTickOnceOnTwoDispatchers(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	store := func() *postgres.Persistence {
		p, err := postgres.New(pool, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[time.Time]int{}
	var problems []string
	for range 2 {
		bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Persistence: store(),
			Dispatcher: bus.DispatcherConfig{PollInterval: 200 * time.Millisecond}}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, func(ctx context.Context, _ recTick) error {
				now := time.Now()
				tick, err := time.Parse(time.RFC3339Nano, bus.IncomingMessage(ctx).Header(bus.HeaderRecurringTick))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("tick header: %v", err))
				case now.Before(tick):
					problems = append(problems, fmt.Sprintf("tick %v handled early, at %v", tick, now))
				}
				seen[tick.UTC()]++
				return nil
			}))
		})
	}
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store(), SendOnly: true}, nil)
	name := "runtime-" + schema
	set := time.Now()
	if err := ops.SetRecurring(t.Context(), bus.RecurringSpec{Name: name, Schedule: "@every 1s", Message: recTick{},
		Options: []bus.Option{bus.To("worker")}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	end := time.Now()
	time.Sleep(1500 * time.Millisecond) // the ticks due by end arrive
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %v handled %d times", tick, n)
		}
	}
	// Every tick from the first after SetRecurring to end arrived.
	for tick := set.Truncate(time.Second).Add(time.Second); !tick.After(end); tick = tick.Add(time.Second) {
		if seen[tick.UTC()] == 0 {
			t.Errorf("tick %v never handled (%d ticks handled)", tick.UTC(), len(seen))
		}
	}
}

// ListRecurringPage takes the prefix literally (LIKE's wildcards, byte
// order past ASCII, the highest code point) and pages in byte order, as
// the in-memory store does, also for a prefix or an after that text
// cannot hold.
func TestRuntimeRecurringPagesLikeTheMemoryStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newStore(t, testPool(t), postgres.Options{})
	mem := bus.NewMemoryPersistence()
	names := []string{"a", "a_b", "a_c", "axb", "a%b", "a%", "a\\b", "ab", "b", "é", "éa", "éz", "ê",
		"\U0010FFFF", "\U0010FFFFa", "a\U0010FFFF", "a\U0010FFFFb", "\uFFFF", "\uE000", "\uD7FF"}
	for _, s := range []bus.RecurringStore{p, mem} {
		for _, n := range names {
			if _, _, err := s.DeclareRecurring(ctx, bus.RecurringRecord{Name: n, Fingerprint: "fp", Schedule: "s"}); err != nil {
				t.Fatalf("DeclareRecurring(%q): %v", n, err)
			}
		}
	}
	for _, prefix := range []string{"", "a", "a_", "a%", "a\\", "é", "\U0010FFFF", "a\U0010FFFF", "\uD7FF", "\xff", "a\x00", "\xc3"} {
		for _, after := range []string{"", "a", "a_b", "é", "\xc3", "\xc3\xa9\xff", "a\x00", "\U0010FFFF"} {
			for _, limit := range []int{1, 3, 100} {
				want, err := mem.ListRecurringPage(ctx, prefix, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				got, err := p.ListRecurringPage(ctx, prefix, after, limit)
				if err != nil {
					t.Fatalf("ListRecurringPage(%q, %q, %d): %v", prefix, after, limit, err)
				}
				if g, w := recordNames(got), recordNames(want); fmt.Sprint(g) != fmt.Sprint(w) {
					t.Errorf("ListRecurringPage(%q, %q, %d) = %q, want %q", prefix, after, limit, g, w)
				}
			}
		}
	}
}

func recordNames(recs []bus.RecurringRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Name
	}
	return out
}

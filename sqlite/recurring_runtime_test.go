package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// invoiceRun is the message of the runtime schedule of the whole-bus test.
type invoiceRun struct{ Tenant string }

// A schedule made at runtime by a send-only bus runs on the two
// dispatching buses of its endpoint, each on a handle of its own on one
// database file: over five seconds every tick of "@every 1s" arrives once,
// none before its tick.
func TestRuntimeRecurringEachTickOnceOnTwoDispatchers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "postbus.db")
	open := func() *sqlite.Persistence {
		p, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() }) // after the buses stopped: cleanups run last first
		return p
	}
	first, second := open(), open()
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[time.Time]int{}
	var early, bad []string
	for _, p := range []*sqlite.Persistence{first, second} {
		bustest.StartBus(t, bus.Config{Endpoint: "invoicing", Transport: tr, Persistence: p,
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}}, func(b *bus.Bus) {
			if err := bus.Handle(b, func(ctx context.Context, m invoiceRun) error {
				at := time.Now()
				env := bus.IncomingMessage(ctx)
				tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil || m.Tenant != "acme":
					bad = append(bad, env.Header(bus.HeaderRecurringTick)+" "+m.Tenant)
				case at.Before(tick):
					early = append(early, tick.String()+" at "+at.String())
				}
				seen[tick]++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: first, SendOnly: true}, nil)
	set := time.Now()
	if err := ops.SetRecurring(t.Context(), bus.RecurringSpec{Name: "invoices-" + t.Name(), Schedule: "@every 1s",
		Message: invoiceRun{Tenant: "acme"}, Options: []bus.Option{bus.To("invoicing")}}); err != nil {
		t.Fatal(err)
	}
	var want []time.Time // the ticks after the set, over five seconds
	for tick := set.Truncate(time.Second).Add(time.Second); tick.Before(set.Add(5 * time.Second)); tick = tick.Add(time.Second) {
		want = append(want, tick.UTC())
	}
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, tick := range want {
			if seen[tick] == 0 {
				n++
			}
		}
		return n
	}
	// Generous: the machine is shared; a tick is due at most a poll
	// interval and a hand-over after it.
	for deadline := want[len(want)-1].Add(10 * time.Second); missing() > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would show up now
	mu.Lock()
	defer mu.Unlock()
	for _, tick := range want {
		if seen[tick] == 0 {
			t.Errorf("tick %v never arrived (%d ticks seen)", tick, len(seen))
		}
	}
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %v arrived %d times", tick, n)
		}
		if !tick.After(set.Add(-time.Millisecond)) {
			t.Errorf("tick %v is before the schedule was set at %v", tick, set)
		}
	}
	if len(early) > 0 || len(bad) > 0 {
		t.Errorf("early: %v; without a tick header or the message: %v", early, bad)
	}
}

// A nil Spec (declared in code) and an empty one (made at runtime) stay
// apart: NULL and a zero-length BLOB.
func TestRuntimeRecurringEmptySpecIsNotNil(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx := t.Context()
	for name, spec := range map[string][]byte{"code": nil, "empty": {}} {
		if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp", Schedule: "@every 1m", Spec: spec}); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := p.LoadRecurring(ctx, name)
		if err != nil || !ok || (rec.Spec == nil) != (spec == nil) || len(rec.Spec) != 0 {
			t.Errorf("record with Spec %#v loads with %#v (%v, %v)", spec, rec.Spec, ok, err)
		}
	}
}

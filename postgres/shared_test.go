package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// scopedCommand and scopedEvent are what the two services of the shared
// table schedule; From names the service that scheduled them.
type scopedCommand struct {
	From string
	N    int
}

func (scopedCommand) MessageName() string { return "postgres_test.ScopedCommand" }

type scopedEvent struct {
	From string
	N    int
}

func (scopedEvent) MessageName() string { return "postgres_test.ScopedEvent" }

// otherBroker is a second in-memory broker under an identity of its own,
// as a second RabbitMQ host would be. It records the ID of every message
// handed to it.
type otherBroker struct {
	*bus.MemoryTransport
	mu   sync.Mutex
	sent []string
}

func (o *otherBroker) Identity() string { return "memory-other-broker" }

func (o *otherBroker) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	o.record(env.ID)
	return o.MemoryTransport.Send(ctx, queue, env)
}

func (o *otherBroker) Publish(ctx context.Context, env *bus.Envelope) error {
	o.record(env.ID)
	return o.MemoryTransport.Publish(ctx, env)
}

func (o *otherBroker) record(id string) {
	o.mu.Lock()
	o.sent = append(o.sent, id)
	o.mu.Unlock()
}

func (o *otherBroker) sentIDs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.sent)
}

// TestSharedTableSendsRowsThroughTheirOwnTransport runs two services on
// one scheduled-message table but on different brokers. Each schedules 10
// commands to itself and publishes 10 events, all delayed and due at about
// the same moment, and each subscribes to the same event type on its own
// broker. Every message must arrive through the broker it was scheduled
// on: a dispatcher that claimed the other service's rows would send its
// commands to a broker where nobody consumes them, and publish its events
// to the wrong subscribers.
func TestSharedTableSendsRowsThroughTheirOwnTransport(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	other := &otherBroker{MemoryTransport: bus.NewMemoryTransport()}
	services := []struct {
		name      string
		transport bus.Transport
	}{{"alpha", bus.NewMemoryTransport()}, {"beta", other}}
	const each = 20
	recs := make([]*bustest.Recorder[string], len(services))
	buses := make([]*bus.Bus, len(services))
	stores := make([]*postgres.Persistence, len(services))
	for i, s := range services {
		store, err := postgres.New(newPool(t, 6), postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		rec := bustest.NewRecorder[string]()
		recs[i], stores[i] = rec, store
		buses[i] = bustest.StartBus(t, bus.Config{Endpoint: s.name, Transport: s.transport, Persistence: store,
			Dispatcher: bus.DispatcherConfig{PollInterval: 200 * time.Millisecond}}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, func(ctx context.Context, m scopedCommand) error {
				return rec.Handler(ctx, fmt.Sprintf("%s command %d", m.From, m.N))
			}))
			mustDo(t, bus.Handle(b, func(ctx context.Context, m scopedEvent) error {
				return rec.Handler(ctx, fmt.Sprintf("%s event %d", m.From, m.N))
			}))
			mustDo(t, bus.Route[scopedCommand](b, s.name))
		})
	}
	ctx := ctxTimeout(t, time.Minute)
	due := time.Now().Add(time.Second)
	sentBy := make([][]string, len(services))
	var wg sync.WaitGroup
	for i, s := range services {
		wg.Go(func() {
			for n := range each / 2 {
				cmdID, evtID := fmt.Sprintf("%s-cmd-%02d", s.name, n), fmt.Sprintf("%s-evt-%02d", s.name, n)
				sentBy[i] = append(sentBy[i], cmdID, evtID)
				if err := buses[i].Send(ctx, scopedCommand{From: s.name, N: n}, bus.DeliverAfter(max(time.Until(due), 0)), bus.WithMessageID(cmdID)); err != nil {
					t.Error(err)
					return
				}
				if err := buses[i].Publish(ctx, scopedEvent{From: s.name, N: n}, bus.DeliverAt(due), bus.WithMessageID(evtID)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Wait until both dispatchers have sent everything: the table is empty.
	waitFor(t, func() bool {
		var left int
		err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM `+stores[0].Table()).Scan(&left)
		return err == nil && left == 0
	})
	for i, s := range services {
		want := make([]string, 0, each)
		for n := range each / 2 {
			want = append(want, fmt.Sprintf("%s command %d", s.name, n), fmt.Sprintf("%s event %d", s.name, n))
		}
		slices.Sort(want)
		got := waitForMessages(recs[i], each)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s received %d messages, want its own %d and no other:\n got %q\nwant %q", s.name, len(got), each, got, want)
		}
	}
	gotOther := other.sentIDs()
	slices.Sort(gotOther)
	wantOther := slices.Sorted(slices.Values(sentBy[1]))
	if !slices.Equal(gotOther, wantOther) {
		t.Errorf("the other broker was handed %q, want exactly beta's messages %q", gotOther, wantOther)
	}
}

// waitForMessages returns what rec recorded once it has n messages, or
// what it has after 15 s.
func waitForMessages(rec *bustest.Recorder[string], n int) []string {
	for deadline := time.Now().Add(15 * time.Second); rec.Len() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return rec.Messages()
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

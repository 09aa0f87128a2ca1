package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// otherBroker is an in-memory transport that names a different broker: it
// stands for a second service's RabbitMQ next to the first one's.
type otherBroker struct{ *bus.MemoryTransport }

func (otherBroker) Identity() string { return "memory-other-broker" }

var _ bus.TransportIdentity = otherBroker{}

type sharedFileTick struct{ N int }

// TestSharedFileSendsRowsThroughTheirOwnTransport: two services keep their
// delayed messages in one SQLite file, each with a transport of its own
// and the same endpoint and message type, so a row sent through the wrong
// transport would reach the other service's handler. Every message must
// arrive through the transport it was scheduled on.
func TestSharedFileSendsRowsThroughTheirOwnTransport(t *testing.T) {
	t.Parallel()
	const perBus, endpoint = 20, "shared-file"
	path := filepath.Join(t.TempDir(), "shared.db")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	transports := map[string]bus.Transport{"a": bus.NewMemoryTransport(), "b": otherBroker{bus.NewMemoryTransport()}}
	var mu sync.Mutex
	got := map[string]map[string]int{"a": {}, "b": {}} // service -> message ID -> deliveries
	all := make(chan struct{})
	total := 0
	buses := map[string]*bus.Bus{}
	for name, tr := range transports {
		p := openAt(t, path, sqlite.Options{})
		buses[name] = bustest.StartBus(t, bus.Config{Endpoint: endpoint, Transport: tr, Persistence: p}, func(b *bus.Bus) {
			if err := bus.Route[sharedFileTick](b, endpoint); err != nil {
				t.Fatal(err)
			}
			err := bus.Handle(b, func(ctx context.Context, _ sharedFileTick) error {
				mu.Lock()
				defer mu.Unlock()
				got[name][bus.IncomingMessage(ctx).ID]++
				if total++; total == 2*perBus {
					close(all)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	for i := range perBus {
		for name, b := range buses {
			id := fmt.Sprintf("%s-%02d", name, i)
			if err := b.Send(ctx, sharedFileTick{N: i}, bus.DeliverAfter(100*time.Millisecond), bus.WithMessageID(id)); err != nil {
				t.Fatalf("Send %s: %v", id, err)
			}
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("only %d of %d messages arrived", total, 2*perBus)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, ids := range got {
		for id := range ids {
			if id[:1] != name {
				t.Errorf("message %s, scheduled through service %s's transport, arrived through service %s's", id, id[:1], name)
			}
		}
		if len(ids) != perBus {
			t.Errorf("service %s received %d distinct messages, want its own %d", name, len(ids), perBus)
		}
	}
}

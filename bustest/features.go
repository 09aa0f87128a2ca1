package bustest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// Features declares what a transport guarantees beyond the contract every
// transport keeps. TransportTests runs the case of a feature only when the
// transport declares it, and skips it, saying so, when it does not.
type Features struct {
	// OrderedByKey: messages with one Envelope.OrderingKey (bus.WithOrderingKey)
	// reach the handlers of an endpoint in the order they were sent, even
	// with Concurrency above 1 (Kafka partitions, SQS FIFO message groups).
	OrderedByKey bool
	// NativeRedelivery: a message whose DeliveryHandler returned an error is
	// delivered again by the transport itself (a requeue, a nak). Without
	// it, the core sends a failed message back through the store.
	NativeRedelivery bool
	// MaxMessageSize is the largest body, in bytes, the transport carries
	// (the suite sends one of this size). Zero means at least 1 MiB.
	MaxMessageSize int
	// KeepsUnsubscribedPublish: an event published before any endpoint
	// subscribed to its type is kept and delivered to a later subscriber.
	KeepsUnsubscribedPublish bool
}

// featureCases are the cases gated by Features.
func featureCases(f Features) []transportCase {
	return []transportCase{
		{"OrderedByKey", gate(f.OrderedByKey, "OrderedByKey", testOrderedByKey)},
		{"NativeRedelivery", gate(f.NativeRedelivery, "NativeRedelivery", testNativeRedelivery)},
		{"LargestMessageArrivesWhole", func(t *testing.T, tr bus.Transport, ns string) { testLargestMessage(t, tr, ns, f.MaxMessageSize) }},
		{"PublishBeforeSubscribeIsKept", gate(f.KeepsUnsubscribedPublish, "KeepsUnsubscribedPublish", testPublishBeforeSubscribe)},
	}
}

type transportCase struct {
	name string
	fn   func(t *testing.T, tr bus.Transport, ns string)
}

func gate(declared bool, feature string, fn func(*testing.T, bus.Transport, string)) func(*testing.T, bus.Transport, string) {
	return func(t *testing.T, tr bus.Transport, ns string) {
		if !declared {
			t.Skipf("the transport does not declare Features.%s", feature)
		}
		fn(t, tr, ns)
	}
}

// Ordered is the message of the ordering case.
type Ordered struct {
	Key string
	N   int
}

func testOrderedByKey(t *testing.T, tr bus.Transport, ns string) {
	const perKey = 50
	keys := []string{"k1", "k2", "k3"}
	var mu sync.Mutex
	seen := map[string][]int{}
	done := NewRecorder[Ordered]()
	c := cfg(tr, ns, "ordered")
	c.Concurrency = 4
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Ordered) error {
			mu.Lock()
			seen[m.Key] = append(seen[m.Key], m.N)
			mu.Unlock()
			return done.Handler(ctx, m)
		})
	})
	for i := range perKey {
		for _, k := range keys {
			if err := b.Send(ctxFor(t), Ordered{Key: k, N: i}, bus.To(c.Endpoint), bus.WithOrderingKey(k)); err != nil {
				t.Fatalf("Send: %v", err)
			}
		}
	}
	done.WaitFor(t, perKey*len(keys))
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		for i, n := range seen[k] {
			if n != i {
				t.Fatalf("key %s: handled %v, want 0..%d in order", k, seen[k], perKey-1)
			}
		}
	}
}

func testNativeRedelivery(t *testing.T, tr bus.Transport, ns string) {
	const n = 5
	queue := ns + "-redelivered"
	if err := tr.Provision(ctxFor(t), bus.Topology{Queue: queue}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	var mu sync.Mutex
	deliveries := map[string]int{}
	var acked atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 2}, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			deliveries[env.ID]++
			first := deliveries[env.ID] == 1
			mu.Unlock()
			if first {
				return errors.New("fail the first delivery")
			}
			acked.Add(1)
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	for i := range n {
		env := &bus.Envelope{ID: ns + "-r" + string(rune('a'+i)), Type: "bustest.Redelivered", Kind: bus.KindCommand,
			Body: []byte(`{}`), ContentType: "application/json", Destination: queue, SentAt: time.Now().UTC()}
		if err := tr.Send(ctxFor(t), queue, env); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for acked.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("%d of %d failed messages were delivered again", got, n)
	}
}

// Large is the message of the size case.
type Large struct{ Data string }

func testLargestMessage(t *testing.T, tr bus.Transport, ns string, limit int) {
	if limit <= 0 {
		limit = 1 << 20
	}
	data := strings.Repeat("x", limit-len(`{"Data":""}`))
	rec := NewRecorder[Large]()
	c := cfg(tr, ns, "large")
	c.MaxMessageSize = limit
	b := StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, rec.Handler) })
	if err := b.Send(ctxFor(t), Large{Data: data}, bus.To(c.Endpoint)); err != nil {
		t.Fatalf("Send of a %d-byte body: %v", limit, err)
	}
	rec.WaitFor(t, 1)
	got, envs, _ := rec.snapshot()
	if got[0].Data != data || len(envs[0].Body) != limit {
		t.Errorf("a %d-byte body arrived as %d bytes", limit, len(envs[0].Body))
	}
}

// Early is the event of the publish-before-subscribe case.
type Early struct{ N int }

func testPublishBeforeSubscribe(t *testing.T, tr bus.Transport, ns string) {
	pub := StartBus(t, cfg(tr, ns, "early-publisher"), nil)
	if err := pub.Publish(ctxFor(t), Early{N: 1}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	rec := NewRecorder[Early]()
	StartBus(t, cfg(tr, ns, "late-subscriber"), func(b *bus.Bus) { _ = bus.Handle(b, rec.Handler) })
	rec.WaitFor(t, 1)
}

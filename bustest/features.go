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
	"github.com/postbus/bus/internal/poll"
)

// Features declares what a transport guarantees beyond the contract every
// transport keeps. TransportTests runs the case of a feature only when the
// transport declares it, and logs the cases it leaves out (they are not
// skipped tests: nothing is owed).
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

// featureCases returns the cases of the features f declares, and logs the
// ones it leaves out.
func featureCases(t *testing.T, f Features) []transportCase {
	cases := []transportCase{
		{"LargestMessageArrivesWhole", func(t *testing.T, tr bus.Transport, ns string) { testLargestMessage(t, tr, ns, f.MaxMessageSize) }},
	}
	for _, g := range []struct {
		declared bool
		c        transportCase
	}{
		{f.OrderedByKey, transportCase{"OrderedByKey", testOrderedByKey}},
		{f.NativeRedelivery, transportCase{"NativeRedelivery", testNativeRedelivery}},
		{f.KeepsUnsubscribedPublish, transportCase{"PublishBeforeSubscribeIsKept", testPublishBeforeSubscribe}},
	} {
		if g.declared {
			cases = append(cases, g.c)
		} else {
			t.Logf("case %s not run: the transport does not declare that feature", g.c.name)
		}
	}
	return cases
}

type transportCase struct {
	name string
	fn   func(t *testing.T, tr bus.Transport, ns string)
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
	poll.Eventually(t, waitTimeout, func() bool { return acked.Load() >= n }, "the %d failed messages to be delivered again", n)
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

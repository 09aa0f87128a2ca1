package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Step is the message of the ordering test.
type Step struct {
	Key string
	N   int
}

// 10,000 messages over 20 keys, 8 handlers at once: each key's messages
// are handled in the order they were sent.
func TestOrderPerKeyWithEightHandlers(t *testing.T) {
	t.Parallel()
	const keys, perKey = 20, 500
	tr, _ := newTransport(t)
	var (
		mu      sync.Mutex
		seen    = map[string][]int{}
		running atomic.Int64
		peak    atomic.Int64
		total   atomic.Int64
	)
	all := make(chan struct{})
	c := bus.Config{Endpoint: "ordered", Transport: tr, Concurrency: 8, Logger: drivertest.Logger()}
	b := bustest.StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(_ context.Context, m Step) error {
			now := running.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			mu.Lock()
			seen[m.Key] = append(seen[m.Key], m.N)
			mu.Unlock()
			running.Add(-1)
			if total.Add(1) == keys*perKey {
				close(all)
			}
			return nil
		})
	})
	start := time.Now()
	var senders sync.WaitGroup
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		senders.Go(func() {
			for i := range perKey {
				if err := b.Send(drivertest.Ctx(t, 0), Step{Key: key, N: i}, bus.To(c.Endpoint), bus.WithOrderingKey(key)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		})
	}
	senders.Wait()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		t.Fatalf("handled %d of %d messages", total.Load(), keys*perKey)
	}
	t.Logf("%d messages over %d keys handled in %v, at most %d handlers at once",
		keys*perKey, keys, time.Since(start).Round(time.Millisecond), peak.Load())
	mu.Lock()
	defer mu.Unlock()
	for k, ns := range seen {
		for i, n := range ns {
			if n != i {
				t.Fatalf("key %s: message %d handled in place %d", k, n, i)
			}
		}
	}
	if p := peak.Load(); p > 8 {
		t.Errorf("%d handlers ran at once, Concurrency is 8", p)
	}
}

// Job is the message of the failure test.
type Job struct {
	Key string
	N   int
}

// A message that fails three times goes to the error topic, while the other
// messages of its partition (one partition here, so all of them) go on.
func TestFailingMessageReachesErrorTopicWhileItsPartitionContinues(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, seeds)
	opts.Partitions = 1
	tr := mustNew(t, seeds, opts)
	const others = 50
	var (
		attempts  atomic.Int64
		mu        sync.Mutex
		handledAt = map[int]time.Time{}
		othersIn  = make(chan struct{})
		waited    atomic.Bool
	)
	c := bus.Config{Endpoint: "jobs", Transport: tr, Concurrency: 4, ErrorQueue: "jobs-error", Logger: drivertest.Logger()}
	c.Retries.Immediate = 2 // three attempts; the in-memory store means no delayed retries
	b := bustest.StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(_ context.Context, m Job) error {
			if m.Key == "bad" {
				// The first attempt holds the message until every later
				// message of the partition was handled.
				if attempts.Add(1) == 1 {
					select {
					case <-othersIn:
						waited.Store(true)
					case <-time.After(time.Minute):
					}
				}
				return errors.New("always fails")
			}
			mu.Lock()
			handledAt[m.N] = time.Now()
			if len(handledAt) == others {
				close(othersIn)
			}
			mu.Unlock()
			return nil
		})
	})
	errs := make(chan *bus.Envelope, 10)
	errAt := make(chan time.Time, 10)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(rctx, "jobs-error", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			errAt <- time.Now()
			errs <- env
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })

	if err := b.Send(drivertest.Ctx(t, 0), Job{Key: "bad"}, bus.To("jobs"), bus.WithOrderingKey("bad"), bus.WithMessageID("bad-1")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= others; i++ {
		if err := b.Send(drivertest.Ctx(t, 0), Job{Key: "good", N: i}, bus.To("jobs"), bus.WithOrderingKey(fmt.Sprint("good-", i%5))); err != nil {
			t.Fatal(err)
		}
	}
	var failed *bus.Envelope
	var failedAt time.Time
	select {
	case failed = <-errs:
		failedAt = <-errAt
	case <-time.After(time.Minute):
		t.Fatal("the failing message did not reach the error topic")
	}
	if failed.ID != "bad-1" || failed.Header(bus.HeaderFailureAttempts) != "3" {
		t.Errorf("error topic got %s after %s attempts, want bad-1 after 3", failed.ID, failed.Header(bus.HeaderFailureAttempts))
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("the failing handler ran %d times, want 3", n)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(handledAt)
		mu.Unlock()
		if n == others || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handledAt) != others {
		t.Fatalf("handled %d of the %d other messages", len(handledAt), others)
	}
	before := 0
	for _, at := range handledAt {
		if at.Before(failedAt) {
			before++
		}
	}
	if !waited.Load() || before != others {
		t.Errorf("only %d of %d later messages of the partition were handled while the failing one was retried", before, others)
	}
}

// On a rebalance, the handlers of a revoked partition see their ctx
// cancelled, and their messages go to the new owner: nothing past what was
// settled is committed.
func TestRevocationCancelsHandlersAndRedelivers(t *testing.T) {
	t.Parallel()
	tr, _ := newTransport(t)
	const queue, n = "rebalanced", 16
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var cancelled atomic.Int64
	var mu sync.Mutex
	firstSeen, secondSeen := map[string]bool{}, map[string]bool{}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() {
		defer close(done1)
		_ = tr.Receive(ctx1, queue, bus.ReceiveOptions{Concurrency: n}, func(ctx context.Context, env *bus.Envelope) error {
			mu.Lock()
			firstSeen[env.ID] = true
			mu.Unlock()
			select {
			case <-ctx.Done():
				cancelled.Add(1)
				return ctx.Err()
			case <-release:
				return nil
			}
		})
	}()
	for i := range n {
		env := &bus.Envelope{ID: fmt.Sprint("r-", i), Type: "test.Rebalanced", Kind: bus.KindCommand, Body: []byte(`{}`),
			ContentType: "application/json", Destination: queue, SentAt: time.Now().UTC(), OrderingKey: fmt.Sprint("key-", i)}
		if err := tr.Send(drivertest.Ctx(t, 0), queue, env); err != nil {
			t.Fatal(err)
		}
	}
	drivertest.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(firstSeen) == n
	}, "the first consumer holds every message")
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		_ = tr.Receive(ctx2, queue, bus.ReceiveOptions{Concurrency: n}, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			secondSeen[env.ID] = true
			mu.Unlock()
			return nil
		})
	}()
	drivertest.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return cancelled.Load() > 0 && len(secondSeen) == int(cancelled.Load())
	}, "a revoked partition's messages reach the second consumer")
	close(release)
	stop1()
	<-done1
	stop2()
	<-done2
	t.Logf("%d handlers cancelled by the revocation; their messages were handled by the new owner", cancelled.Load())
}

// A record another program wrote to a queue topic, without the envelope
// headers, reaches the error topic instead of blocking its partition.
func TestForeignRecordGoesToErrorTopic(t *testing.T) {
	t.Parallel()
	tr, opts := newTransport(t)
	c := bus.Config{Endpoint: "inbox", Transport: tr, ErrorQueue: "inbox-error", Logger: drivertest.Logger()}
	bustest.StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, func(context.Context, Job) error { return nil }) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(drivertest.Ctx(t, 0), &kgo.Record{Topic: opts.TopicPrefix + ".q.inbox", Value: []byte("not an envelope")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := make(chan *bus.Envelope, 1)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(rctx, "inbox-error", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			got <- env
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case env := <-got:
		if string(env.Body) != "not an envelope" || env.Header(bus.HeaderFailureKind) != "poison" {
			t.Errorf("error topic got body %q kind %q", env.Body, env.Header(bus.HeaderFailureKind))
		}
		if reason := env.Header(bus.HeaderFailureReason); !strings.HasPrefix(reason, "kafka: ") || !strings.Contains(reason, "type") {
			t.Errorf("error topic got failure reason %q, want the decoder's", reason)
		}
	case <-time.After(time.Minute):
		t.Fatal("the foreign record did not reach the error topic")
	}
}

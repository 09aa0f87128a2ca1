package bustest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// TransportFactory returns a transport for one test case. The suite builds
// several buses on it (competing consumers, publisher and subscribers), with
// endpoint names under a random Namespace, so one broker serves cases
// running in parallel.
type TransportFactory func(t *testing.T) bus.Transport

// Messages the suite exchanges. Each event type is published by one case
// only, so parallel cases on one broker never see each other's events.
type (
	// Ping is a command.
	Ping struct{ N int }
	// Pong is a reply.
	Pong struct{ N int }
	// Published is the event of the publish case.
	Published struct{ N int }
	// Failing is a command whose handler fails.
	Failing struct{ N int }
)

// TransportTests runs the transport contract, through real buses, against
// transports made by newTransport; features says what the transport
// guarantees beyond it (the cases of undeclared features are skipped).
// After each case every queue the case used must be empty.
func TransportTests(t *testing.T, newTransport TransportFactory, features Features) {
	cases := []transportCase{
		{"SendAndReceive", testSendReceive},
		{"PublishReachesEverySubscriber", testPublish},
		{"CompetingConsumersHandleEachMessageOnce", testCompeting},
		{"EnvelopeRoundTrips", testEnvelopeRoundTrip},
		{"Reply", testReply},
		{"FailedMessageIsRetriedThenMovedToErrorQueue", testErrorQueue},
		{"RetrySucceeds", testRetrySucceeds},
		{"PoisonMessagesGoToErrorQueue", testPoison},
		{"ConcurrencyBoundIsHonoured", testConcurrencyBound},
		{"StopWithMessagesInFlightLosesNone", testStopInFlight},
		{"FailedHandlerSendsNothing", testFailedHandlerSendsNothing},
		{"DelayedDelivery", testDelayedOverTransport},
		{"DelayedRetriesThenErrorQueue", testDelayedRetries},
		{"TimeToBeReceivedExpiresInQueue", testTimeToBeReceived},
		{"TimeToReachQueueLapsesDuringOutage", testTimeToReachQueue},
		{"PositiveAcknowledgements", testPositiveAcks},
		{"DeadLetterQueueConsumerNeverExpiresAgain", testDeadLetterFinal},
	}
	for _, c := range append(cases, featureCases(t, features)...) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr := newRecordingTransport(newTransport(t))
			t.Cleanup(func() { tr.checkNoLeftovers(t) }) // runs after the buses stopped
			c.fn(t, tr, Namespace())
		})
	}
}

func cfg(tr bus.Transport, ns, endpoint string) bus.Config {
	return bus.Config{Endpoint: ns + "-" + endpoint, Transport: tr, ErrorQueue: ns + "-error",
		DeadLetterQueue: ns + "-deadletter", Concurrency: 4}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testSendReceive(t *testing.T, tr bus.Transport, ns string) {
	rec := NewRecorder[Ping]()
	StartBus(t, cfg(tr, ns, "receiver"), func(b *bus.Bus) { _ = bus.Handle(b, rec.Handler) })
	sender := StartBus(t, cfg(tr, ns, "sender"), func(b *bus.Bus) { _ = bus.Route[Ping](b, ns+"-receiver") })
	for i := range 10 {
		if err := sender.Send(ctxFor(t), Ping{N: i}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	rec.expectExactly(t, 10, 200*time.Millisecond)
	got, _, _ := rec.snapshot()
	seen := map[int]bool{}
	for _, p := range got {
		seen[p.N] = true
	}
	if len(seen) != 10 {
		t.Errorf("received %v, want N 0..9 once each", got)
	}
}

func testPublish(t *testing.T, tr bus.Transport, ns string) {
	a, b := NewRecorder[Published](), NewRecorder[Published]()
	StartBus(t, cfg(tr, ns, "sub-a"), func(x *bus.Bus) { _ = bus.Handle(x, a.Handler) })
	StartBus(t, cfg(tr, ns, "sub-b"), func(x *bus.Bus) { _ = bus.Handle(x, b.Handler) })
	pub := StartBus(t, cfg(tr, ns, "publisher"), nil)
	for i := range 5 {
		if err := pub.Publish(ctxFor(t), Published{N: i}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	a.expectExactly(t, 5, 0)
	b.expectExactly(t, 5, 200*time.Millisecond)
	if a.Len() != 5 {
		t.Errorf("subscriber a received %d events, want 5", a.Len())
	}
}

func testCompeting(t *testing.T, tr bus.Transport, ns string) {
	const n = 200
	var mu sync.Mutex
	counts := map[int]int{}
	perInstance := [2]atomic.Int64{}
	for i := range 2 {
		c := cfg(tr, ns, "worker")
		c.Concurrency = 2
		StartBus(t, c, func(b *bus.Bus) {
			_ = bus.Handle(b, func(_ context.Context, m Ping) error {
				time.Sleep(time.Millisecond)
				mu.Lock()
				counts[m.N]++
				mu.Unlock()
				perInstance[i].Add(1)
				return nil
			})
		})
	}
	sender := StartBus(t, cfg(tr, ns, "sender"), func(b *bus.Bus) { _ = bus.Route[Ping](b, ns+"-worker") })
	for i := range n {
		if err := sender.Send(ctxFor(t), Ping{N: i}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	poll.Eventually(t, waitTimeout, func() bool { return perInstance[0].Load()+perInstance[1].Load() >= n }, "%d messages handled", n)
	time.Sleep(200 * time.Millisecond) // a duplicate would show up now
	mu.Lock()
	defer mu.Unlock()
	if len(counts) != n {
		t.Fatalf("handled %d distinct messages, want %d", len(counts), n)
	}
	for k, c := range counts {
		if c != 1 {
			t.Errorf("message %d handled %d times", k, c)
		}
	}
	if perInstance[0].Load() == 0 || perInstance[1].Load() == 0 {
		t.Errorf("work not shared: instance counts %d and %d", perInstance[0].Load(), perInstance[1].Load())
	}
}

func testEnvelopeRoundTrip(t *testing.T, tr bus.Transport, ns string) {
	rec := NewRecorder[Ping]()
	StartBus(t, cfg(tr, ns, "receiver"), func(b *bus.Bus) { _ = bus.Handle(b, rec.Handler) })
	sender := StartBus(t, cfg(tr, ns, "sender"), nil)
	before := time.Now()
	err := sender.Send(ctxFor(t), Ping{N: 7}, bus.To(ns+"-receiver"),
		bus.WithMessageID("id-"+ns), bus.WithCorrelationID("corr-"+ns),
		bus.WithHeader("x-header", "h value"), bus.WithHeader("x-empty", ""),
		bus.WithAttribute("tenant", "acme"), bus.WithStickyAttribute("trace", "t-1"), bus.WithOrderingKey("key-1"))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	rec.WaitFor(t, 1)
	_, envs, _ := rec.snapshot()
	e := envs[0]
	checks := []struct{ name, got, want string }{
		{"ID", e.ID, "id-" + ns},
		{"Type", e.Type, bus.MessageName(Ping{})},
		{"Kind", e.Kind.String(), "command"},
		{"CorrelationID", e.CorrelationID, "corr-" + ns},
		{"Source", e.Source, ns + "-sender"},
		{"Destination", e.Destination, ns + "-receiver"},
		{"ContentType", e.ContentType, "application/json"},
		{"header", e.Headers["x-header"], "h value"},
		{"attribute", e.Attributes["tenant"], "acme"},
		{"sticky attribute", e.StickyAttributes["trace"], "t-1"},
		{"body", string(e.Body), `{"N":7}`},
		{"ordering key", e.OrderingKey, "key-1"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if v, ok := e.Headers["x-empty"]; !ok || v != "" {
		t.Errorf("empty header lost: %q, %v", v, ok)
	}
	if e.SentAt.Before(before.Add(-time.Second)) || e.SentAt.After(time.Now()) {
		t.Errorf("SentAt = %v, want about %v", e.SentAt, before)
	}
	if !e.DueAt.IsZero() || !e.ExpiresAt.IsZero() {
		t.Errorf("immediate message has DueAt %v ExpiresAt %v, want zero", e.DueAt, e.ExpiresAt)
	}
}

func testReply(t *testing.T, tr bus.Transport, ns string) {
	replies := NewRecorder[Pong]()
	StartBus(t, cfg(tr, ns, "server"), func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Ping) error { return bus.Reply(ctx, Pong(m)) })
	})
	client := StartBus(t, cfg(tr, ns, "client"), func(b *bus.Bus) {
		_ = bus.Route[Ping](b, ns+"-server")
		_ = bus.Handle(b, replies.Handler)
	})
	if err := client.Send(ctxFor(t), Ping{N: 3}, bus.WithCorrelationID("conv-1"), bus.WithStickyAttribute("s", "1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	replies.expectExactly(t, 1, 100*time.Millisecond)
	got, envs, _ := replies.snapshot()
	if got[0].N != 3 || envs[0].Kind != bus.KindReply || envs[0].CorrelationID != "conv-1" || envs[0].StickyAttributes["s"] != "1" {
		t.Errorf("reply = %+v kind %v correlation %q sticky %v", got[0], envs[0].Kind, envs[0].CorrelationID, envs[0].StickyAttributes)
	}
}

func testConcurrencyBound(t *testing.T, tr bus.Transport, ns string) {
	const limit, n = 3, 30
	var running, peak atomic.Int64
	done := NewRecorder[Ping]()
	c := cfg(tr, ns, "bounded")
	c.Concurrency = limit
	b := StartBus(t, c, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m Ping) error {
			now := running.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			return done.Handler(ctx, m)
		})
	})
	for i := range n {
		if err := b.Send(ctxFor(t), Ping{N: i}, bus.To(c.Endpoint)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	done.WaitFor(t, n)
	if p := peak.Load(); p > limit {
		t.Errorf("%d handlers ran at once, Concurrency is %d", p, limit)
	}
}

func testStopInFlight(t *testing.T, tr bus.Transport, ns string) {
	const n = 40
	c := cfg(tr, ns, "stopping")
	c.Concurrency = 4
	c.Retries.Immediate = -1
	var mu sync.Mutex
	handled := map[int]bool{}
	handler := func(ctx context.Context, m Ping) error {
		select {
		case <-time.After(30 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		handled[m.N] = true
		mu.Unlock()
		return nil
	}
	first, err := bus.New(withLogger(c))
	if err != nil {
		t.Fatal(err)
	}
	_ = bus.Handle(first, handler)
	if err := first.Start(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := first.Send(ctxFor(t), Ping{N: i}, bus.To(c.Endpoint)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	// Some handled, some in flight, most waiting.
	poll.Eventually(t, waitTimeout, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 4
	}, "the first messages handled")
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_ = first.Stop(stopCtx) // cuts handlers short: their messages must come back
	cancel()
	StartBus(t, c, func(b *bus.Bus) { _ = bus.Handle(b, handler) })
	poll.Eventually(t, waitTimeout, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == n
	}, "all %d messages handled after a stop with messages in flight", n)
}

func withLogger(c bus.Config) bus.Config {
	c.Logger = quietLogger()
	return c
}

func testDelayedOverTransport(t *testing.T, tr bus.Transport, ns string) {
	rec := NewRecorder[Ping]()
	StartBus(t, cfg(tr, ns, "receiver"), func(b *bus.Bus) { _ = bus.Handle(b, rec.Handler) })
	sender := StartBus(t, cfg(tr, ns, "sender"), func(b *bus.Bus) { _ = bus.Route[Ping](b, ns+"-receiver") })
	const n = 20
	start := time.Now()
	due := make(map[string]time.Time, n)
	for i := range n {
		id := ns + "-d" + strconv.Itoa(i)
		d := 200*time.Millisecond + time.Duration(i)*10*time.Millisecond
		if err := sender.Send(ctxFor(t), Ping{N: i}, bus.DeliverAfter(d), bus.WithMessageID(id),
			bus.WithHeader("h", "v"), bus.WithStickyAttribute("s", fmt.Sprint(i))); err != nil {
			t.Fatalf("Send: %v", err)
		}
		due[id] = start.Add(d)
	}
	rec.expectExactly(t, n, 200*time.Millisecond)
	_, envs, at := rec.snapshot()
	for i, e := range envs {
		want, ok := due[e.ID]
		if !ok {
			t.Errorf("unexpected message %s", e.ID)
			continue
		}
		if at[i].Before(want) || at[i].Before(e.DueAt) {
			t.Errorf("message %s delivered %v early", e.ID, want.Sub(at[i]))
		}
		if e.DueAt.IsZero() || e.Headers["h"] != "v" || !maps.Equal(e.StickyAttributes, map[string]string{"s": e.StickyAttributes["s"]}) || e.StickyAttributes["s"] == "" {
			t.Errorf("delayed message %s lost fields: due %v headers %v sticky %v", e.ID, e.DueAt, e.Headers, e.StickyAttributes)
		}
	}
}

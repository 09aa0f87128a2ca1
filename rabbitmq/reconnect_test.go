package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

// The broker closes the transport's connection twice while messages are
// being sent and handled: every send succeeds (waiting for the reconnection
// when needed), the consumer resumes, and every message is handled.
func TestReconnectAfterConnectionLossLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	opts := e.options()
	var reported atomic.Int64
	opts.OnError = func(error) { reported.Add(1) }
	tr := e.transport(opts)
	q := e.queue("reconnect")
	e.provision(tr, bus.Topology{Queue: q})

	var mu sync.Mutex
	seen := map[string]int{}
	receive(t, tr, q, 4, func(_ context.Context, env *bus.Envelope) error {
		mu.Lock()
		seen[env.ID]++
		mu.Unlock()
		return nil
	})

	const n = 400
	var sent atomic.Int64
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range n / 4 {
				env := newEnvelope("T", []byte(fmt.Sprint(w, i)))
				if err := tr.Send(ctxT(t, 60*time.Second), q, env); err != nil {
					t.Errorf("send during reconnection: %v", err)
					return
				}
				ids <- env.ID
				sent.Add(1)
			}
		})
	}
	for _, at := range []int64{100, 250} {
		drivertest.Eventually(t, 30*time.Second, func() bool { return sent.Load() >= at }, "%d sends", at)
		if c := closeConnections(t, opts.ConnectionName); c != 1 {
			t.Fatalf("closed %d connections named %s, want 1", c, opts.ConnectionName)
		}
	}
	wg.Wait()
	close(ids)
	drivertest.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range ids {
			if seen[id] == 0 {
				return false
			}
		}
		return len(seen) >= n
	}, "every message handled")
	mu.Lock()
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	mu.Unlock()
	if len(seen) != n {
		t.Errorf("%d distinct messages handled, want %d", len(seen), n)
	}
	t.Logf("%d redeliveries or re-sends after 2 connection losses (at-least-once)", dups)
	if reported.Load() < 2 {
		t.Errorf("OnError called %d times, want at least one per lost connection", reported.Load())
	}
}

// A consumer whose connection is lost with handlers in flight resumes on
// the new connection, and the messages it had not acknowledged are
// delivered again.
func TestReconnectRedeliversUnacknowledged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sender := e.transport(e.options())
	opts := e.options()
	consumer := e.transport(opts)
	q := e.queue("inflight")
	e.provision(sender, bus.Topology{Queue: q})
	const n, conc = 20, 4
	ids := sendN(t, sender, q, n)

	var mu sync.Mutex
	ok := map[string]int{}
	var calls atomic.Int64
	gate := make(chan struct{})
	var release sync.Once
	receive(t, consumer, q, conc, func(_ context.Context, env *bus.Envelope) error {
		if calls.Add(1) <= conc {
			<-gate // the first handlers outlive the connection
		}
		mu.Lock()
		ok[env.ID]++
		mu.Unlock()
		return nil
	})
	t.Cleanup(func() { release.Do(func() { close(gate) }) }) // runs before receive's stop
	drivertest.Eventually(t, 10*time.Second, func() bool { return calls.Load() == conc }, "handlers in flight")
	if c := closeConnections(t, opts.ConnectionName); c != 1 {
		t.Fatalf("closed %d connections, want 1", c)
	}
	release.Do(func() { close(gate) })
	drivertest.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ok) == n
	}, "every message after reconnection")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if ok[id] < 1 {
			t.Errorf("message %s never handled", id)
		}
	}
	if calls.Load() < n+conc {
		t.Errorf("%d handler calls, want at least %d (the %d in flight again)", calls.Load(), n+conc, conc)
	}
}

// During an outage a Send waits for the broker: with a short context it
// fails with ErrNotConnected, with a long one it completes once the broker
// is back, and the consumer resumes.
func TestSendDuringOutageWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, proxyURL := newOutageProxy(t)
	tr, err := rabbitmq.New(proxyURL, e.options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	q := e.queue("outage")
	e.provision(tr, bus.Topology{Queue: q})
	var got atomic.Int64
	receive(t, tr, q, 2, func(context.Context, *bus.Envelope) error { got.Add(1); return nil })
	sendN(t, tr, q, 10)

	proxy.cut()
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tr.Send(short, q, newEnvelope("T", nil)); !errors.Is(err, rabbitmq.ErrNotConnected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send during the outage with a short context: got %v, want ErrNotConnected", err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- tr.Send(ctxT(t, 60*time.Second), q, newEnvelope("T", nil)) }()
	select {
	case err := <-waiting:
		t.Fatalf("send returned during the outage: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	proxy.restore()
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("send after the broker came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("send still waiting 30s after the broker came back")
	}
	drivertest.Eventually(t, 30*time.Second, func() bool { return got.Load() >= 11 }, "the consumer to resume")
}

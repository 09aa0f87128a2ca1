package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
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
		eventually(t, 30*time.Second, fmt.Sprintf("%d sends", at), func() bool { return sent.Load() >= at })
		if c := closeConnections(t, opts.ConnectionName); c != 1 {
			t.Fatalf("closed %d connections named %s, want 1", c, opts.ConnectionName)
		}
	}
	wg.Wait()
	close(ids)
	eventually(t, 60*time.Second, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range ids {
			if seen[id] == 0 {
				return false
			}
		}
		return len(seen) >= n
	})
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
	eventually(t, 10*time.Second, "handlers in flight", func() bool { return calls.Load() == conc })
	if c := closeConnections(t, opts.ConnectionName); c != 1 {
		t.Fatalf("closed %d connections, want 1", c)
	}
	release.Do(func() { close(gate) })
	eventually(t, 60*time.Second, "every message after reconnection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ok) == n
	})
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

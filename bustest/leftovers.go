package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// leftoverIdle is how long a queue must stay quiet for the leftover check to
// call it empty.
const leftoverIdle = 300 * time.Millisecond

// recordingTransport remembers every queue a case used, so the suite can
// check, after the case, that none holds a message nobody consumed.
type recordingTransport struct {
	bus.Transport
	mu     sync.Mutex
	queues map[string]bool
}

func newRecordingTransport(tr bus.Transport) *recordingTransport {
	return &recordingTransport{Transport: tr, queues: map[string]bool{}}
}

// Identity forwards the wrapped transport's identity.
func (r *recordingTransport) Identity() string {
	if ti, ok := r.Transport.(bus.TransportIdentity); ok {
		return ti.Identity()
	}
	return ""
}

func (r *recordingTransport) note(queues ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range queues {
		if q != "" {
			r.queues[q] = true
		}
	}
}

func (r *recordingTransport) Provision(ctx context.Context, t bus.Topology) error {
	r.note(append([]string{t.Queue}, t.Queues...)...)
	return r.Transport.Provision(ctx, t)
}

func (r *recordingTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	r.note(queue)
	return r.Transport.Send(ctx, queue, env)
}

func (r *recordingTransport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	r.note(queue)
	return r.Transport.Receive(ctx, queue, opts, h)
}

// checkNoLeftovers consumes every queue the case used and fails the test
// for each message found: a case must consume what it produces, and a
// transport must not keep what was acknowledged.
func (r *recordingTransport) checkNoLeftovers(t *testing.T) {
	r.mu.Lock()
	queues := make([]string, 0, len(r.queues))
	for q := range r.queues {
		queues = append(queues, q)
	}
	r.mu.Unlock()
	for _, q := range queues {
		if n := drainFor(r.Transport, q); n > 0 {
			t.Errorf("%d message(s) left behind in queue %s after the case", n, q)
		}
	}
}

// drainFor consumes queue until it has been quiet for leftoverIdle (at most
// waitTimeout) and returns how many messages it took.
func drainFor(tr bus.Transport, queue string) int {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var mu sync.Mutex
	n := 0
	last := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 4}, func(context.Context, *bus.Envelope) error {
			mu.Lock()
			n++
			last = time.Now()
			mu.Unlock()
			return nil
		})
	}()
	for {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		quiet := time.Since(last) >= leftoverIdle
		mu.Unlock()
		if quiet || ctx.Err() != nil {
			break
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return n
}

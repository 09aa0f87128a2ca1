package bustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// waitTimeout is the generous bound every "eventually" in the suites uses.
const waitTimeout = 30 * time.Second

// Namespace returns a short random prefix for queue and endpoint names, so
// cases can run in parallel on one broker.
func Namespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// quietLogger discards logs below Error, keeping test output readable.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// StartBus builds a bus from cfg (with a quiet logger if it has none), lets
// configure register handlers and routes, starts it, and stops it when the
// test ends.
func StartBus(t testing.TB, cfg bus.Config, configure func(b *bus.Bus)) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatalf("bus.New(%s): %v", cfg.Endpoint, err)
	}
	if configure != nil {
		configure(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start(%s): %v", cfg.Endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

// Recorder collects what a handler received, for assertions: each
// message, its envelope and the time it arrived. Use Handler as the handler.
type Recorder[T any] struct {
	mu     sync.Mutex
	items  []T
	envs   []*bus.Envelope
	at     []time.Time
	signal chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder[T any]() *Recorder[T] { return &Recorder[T]{signal: make(chan struct{}, 1)} }

// Handler records m with its envelope and arrival time, and succeeds.
func (r *Recorder[T]) Handler(ctx context.Context, m T) error {
	r.add(m, bus.IncomingMessage(ctx))
	return nil
}

func (r *Recorder[T]) add(m T, env *bus.Envelope) {
	r.mu.Lock()
	r.items = append(r.items, m)
	r.envs = append(r.envs, env)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// Len returns how many messages were recorded.
func (r *Recorder[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

// WaitFor waits until at least n messages arrived, failing the test after
// 30 seconds.
func (r *Recorder[T]) WaitFor(t testing.TB, n int) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for r.Len() < n {
		select {
		case <-r.signal:
		case <-deadline.C:
			t.Fatalf("received %d messages, want %d within %v", r.Len(), n, waitTimeout)
		}
	}
}

// expectExactly waits for n messages, waits a moment more and asserts no
// more arrived: it catches duplicates.
func (r *Recorder[T]) expectExactly(t *testing.T, n int, quiet time.Duration) {
	t.Helper()
	r.WaitFor(t, n)
	time.Sleep(quiet)
	if got := r.Len(); got != n {
		t.Errorf("received %d messages, want exactly %d", got, n)
	}
}

// Messages returns a copy of the recorded messages, in arrival order.
func (r *Recorder[T]) Messages() []T {
	m, _, _ := r.snapshot()
	return m
}

// Envelopes returns a copy of the recorded envelopes, in arrival order.
func (r *Recorder[T]) Envelopes() []*bus.Envelope {
	_, e, _ := r.snapshot()
	return e
}

// Times returns a copy of the arrival times, in arrival order.
func (r *Recorder[T]) Times() []time.Time {
	_, _, at := r.snapshot()
	return at
}

func (r *Recorder[T]) snapshot() ([]T, []*bus.Envelope, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.items...), append([]*bus.Envelope(nil), r.envs...), append([]time.Time(nil), r.at...)
}

// drainQueue receives every envelope that reaches queue on tr until the
// test ends, into a recorder.
func drainQueue(t *testing.T, tr bus.Transport, queue string) *Recorder[*bus.Envelope] {
	t.Helper()
	rec := NewRecorder[*bus.Envelope]()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 4}, func(_ context.Context, env *bus.Envelope) error {
			rec.add(env, env)
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return rec
}

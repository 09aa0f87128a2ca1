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

// newBus builds and registers cleanup for a bus; configure runs before Start.
func newBus(t *testing.T, cfg bus.Config, configure func(b *bus.Bus)) *bus.Bus {
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

// recorder collects what handlers received, for assertions.
type recorder[T any] struct {
	mu     sync.Mutex
	items  []T
	envs   []*bus.Envelope
	at     []time.Time
	signal chan struct{}
}

func newRecorder[T any]() *recorder[T] { return &recorder[T]{signal: make(chan struct{}, 1)} }

func (r *recorder[T]) handler(ctx context.Context, m T) error {
	r.add(m, bus.IncomingMessage(ctx))
	return nil
}

func (r *recorder[T]) add(m T, env *bus.Envelope) {
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

func (r *recorder[T]) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

// waitFor waits until at least n items arrived, failing the test after waitTimeout.
func (r *recorder[T]) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for r.len() < n {
		select {
		case <-r.signal:
		case <-deadline.C:
			t.Fatalf("received %d messages, want %d within %v", r.len(), n, waitTimeout)
		}
	}
}

// settle waits a moment and asserts no more than n items arrived: used after
// waitFor to catch duplicates.
func (r *recorder[T]) expectExactly(t *testing.T, n int, quiet time.Duration) {
	t.Helper()
	r.waitFor(t, n)
	time.Sleep(quiet)
	if got := r.len(); got != n {
		t.Errorf("received %d messages, want exactly %d", got, n)
	}
}

func (r *recorder[T]) snapshot() ([]T, []*bus.Envelope, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.items...), append([]*bus.Envelope(nil), r.envs...), append([]time.Time(nil), r.at...)
}

// drainQueue receives every envelope that reaches queue on tr until the
// test ends, into a recorder.
func drainQueue(t *testing.T, tr bus.Transport, queue string) *recorder[*bus.Envelope] {
	t.Helper()
	rec := newRecorder[*bus.Envelope]()
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

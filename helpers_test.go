package bus_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

type PlaceOrder struct{ ID string }
type OrderPlaced struct{ ID string }

type Renamed struct{}

func (Renamed) MessageName() string { return "sales.renamed.v1" }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start builds, configures and starts a bus, stopping it at cleanup.
func start(t *testing.T, cfg bus.Config, configure func(*bus.Bus)) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if configure != nil {
		configure(b)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// inbox records handled messages with their envelopes and arrival times.
type inbox[T any] struct {
	mu   sync.Mutex
	msgs []T
	envs []*bus.Envelope
	at   []time.Time
	ch   chan struct{}
}

func newInbox[T any]() *inbox[T] { return &inbox[T]{ch: make(chan struct{}, 1024)} }

func (in *inbox[T]) handle(ctx context.Context, m T) error {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.envs = append(in.envs, bus.IncomingMessage(ctx))
	in.at = append(in.at, time.Now())
	in.mu.Unlock()
	in.ch <- struct{}{}
	return nil
}

func (in *inbox[T]) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.msgs)
}

func (in *inbox[T]) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for in.count() < n {
		select {
		case <-in.ch:
		case <-deadline:
			t.Fatalf("got %d messages, want %d", in.count(), n)
		}
	}
}

// logBuffer captures slog output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

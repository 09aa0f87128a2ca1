package bus_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
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

// eachDispatchMode runs test in parallel subtests for the look-ahead
// dispatcher (Dispatcher.LookAhead 0, the default) and the one that claims
// rows only when due (LookAhead -1).
func eachDispatchMode(t *testing.T, test func(t *testing.T, lookAhead time.Duration)) {
	for _, lookAhead := range []time.Duration{0, -1} {
		t.Run(map[time.Duration]string{0: "look-ahead", -1: "claim-when-due"}[lookAhead], func(t *testing.T) {
			t.Parallel()
			test(t, lookAhead)
		})
	}
}

// Package drivertest holds what the tests of the driver modules share:
// the server address, unique names, a test context and logger, the check of
// a typed error, Eventually (waiting for a condition), the background
// receiver of the benchmarks, golden files of a wire format, and the
// start-up checks of a store that comes up late, refuses, or never answers
// (start.go). The driver modules import it from their tests only.
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Addr returns the value of the environment variable env, or def when it
// is unset: the loopback address of a test server, overridable.
func Addr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// Unique returns prefix followed by 12 random hex digits: a queue, stream,
// key prefix or table name no other test run uses.
func Unique(prefix string) string { return prefix + randomHex(6) }

// ID returns a random message ID of 24 hex digits.
func ID() string { return randomHex(12) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Ctx returns a context that ends after d (two minutes when d is 0) or
// when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	if d == 0 {
		d = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Logger returns the logger of a transport under test: silent, so tests
// stay readable, or everything to stderr when POSTBUS_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("POSTBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

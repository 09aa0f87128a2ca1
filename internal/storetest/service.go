package storetest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Service is the test server of a store, reached through handles of type
// H (a pool, a *sql.DB). A test package declares one as a package variable
// and closes it in TestMain (Main does).
type Service[H any] struct {
	Name    string // the server, as a reader names it: "PostgreSQL"
	Env     string // the environment variable that overrides Default
	Default string // the loopback address of the development machines and CI
	// Show returns the address as a log may show it (secrets redacted);
	// nil: as it is.
	Show func(addr string) string
	// Open opens a handle of at most maxConns connections on addr and
	// checks that the server answers.
	Open func(ctx context.Context, addr string, maxConns int) (H, error)
	// Close closes a handle Open returned.
	Close func(H)
	// SharedConns is the size of the shared handle (default 20).
	SharedConns int

	once   sync.Once
	shared H
	err    error
	opened bool
}

// Addr returns the server's address: Env's value, or Default.
func (s *Service[H]) Addr() string { return drivertest.Addr(s.Env, s.Default) }

// Unavailable skips t, or fails it under CI=true, saying that the server
// is not reachable and why.
func (s *Service[H]) Unavailable(t testing.TB, err error) {
	t.Helper()
	addr := s.Addr()
	if s.Show != nil {
		addr = s.Show(addr)
	}
	bustest.SkipOutsideCI(t, "%s not reachable at %s (set %s): %v", s.Name, addr, s.Env, err)
}

// Shared returns the handle most tests share, opened on first use and
// closed by Shutdown; it skips t (fails it under CI) when the server is
// not reachable.
func (s *Service[H]) Shared(t testing.TB) H {
	t.Helper()
	s.once.Do(func() {
		s.shared, s.err = s.Open(context.Background(), s.Addr(), cmpOr(s.SharedConns, 20))
		s.opened = s.err == nil
	})
	if s.err != nil {
		s.Unavailable(t, s.err)
	}
	return s.shared
}

// Own opens a handle of t's own, closed at cleanup.
func (s *Service[H]) Own(t testing.TB, maxConns int) H {
	t.Helper()
	h, err := s.Open(t.Context(), s.Addr(), maxConns)
	if err != nil {
		s.Unavailable(t, err)
	}
	t.Cleanup(func() { s.Close(h) })
	return h
}

// Shutdown closes the shared handle if it was opened.
func (s *Service[H]) Shutdown() {
	if s.opened {
		s.Close(s.shared)
		s.opened = false
	}
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Setup is what Main does around a test package's tests.
type Setup struct {
	// Children run this binary's role as a child process (a worker, the
	// outbox crash case's child) when its environment asks for one, and
	// then exit; otherwise they return.
	Children []func()
	// Shutdown closes the shared handles, before the leak check.
	Shutdown func()
	// Leaks reports goroutines still running after the tests (goleak.Find
	// in the driver modules); nil: no check.
	Leaks func() error
}

// Main is the TestMain of a store's test package: a child role if asked,
// else the tests, the shared handles closed, and a goroutine-leak check
// when they passed.
func Main(m *testing.M, s Setup) {
	for _, child := range s.Children {
		child()
	}
	code := m.Run()
	if s.Shutdown != nil {
		s.Shutdown()
	}
	if code == 0 && s.Leaks != nil {
		if err := s.Leaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

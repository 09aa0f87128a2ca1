package drivertest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/faultproxy"
)

// LateService returns a loopback address ("127.0.0.1:port") where nothing
// listens until after has passed: then a TCP proxy to target (the real
// server, host:port) starts listening there, as a database does that comes
// up after the service that uses it. The proxy is closed at cleanup.
func LateService(t testing.TB, target string, after time.Duration) string {
	t.Helper()
	addr := bustest.DeadAddr(t)
	var (
		mu     sync.Mutex
		proxy  *faultproxy.Proxy
		closed bool
	)
	timer := time.AfterFunc(after, func() {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		p, err := faultproxy.ListenOn(addr, target)
		if err != nil {
			t.Errorf("late service at %s: %v", addr, err)
			return
		}
		proxy = p
	})
	t.Cleanup(func() {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		if proxy != nil {
			_ = proxy.Close()
		}
	})
	return addr
}

// StartResult is what StartStore saw.
type StartResult struct {
	Err  error         // Start's error
	Took time.Duration // how long Start took
	Log  string        // what the bus logged, at Debug and up
}

// StartStore starts a send-only bus on the in-memory transport with
// persistence p and Config.StartTimeout timeout, with a ctx that never
// ends, and stops it. Start must return within timeout + 30 s.
func StartStore(t testing.TB, p bus.Persistence, timeout time.Duration) StartResult {
	t.Helper()
	return StartConfig(t, bus.Config{Persistence: p, SendOnly: true, StartTimeout: timeout})
}

// StartConfig starts a bus configured by cfg (its Endpoint and Logger
// filled in) with a ctx that never ends, and stops it. Start must return
// within cfg.StartTimeout + 30 s.
func StartConfig(t testing.TB, cfg bus.Config) StartResult {
	t.Helper()
	var logs bustest.LogBuffer
	cfg.Endpoint = Unique("start-")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := bus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- b.Start(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(cfg.StartTimeout + 30*time.Second):
		t.Fatalf("Start did not return within StartTimeout %v + 30 s", cfg.StartTimeout)
	}
	r := StartResult{Err: err, Took: time.Since(began), Log: logs.String()}
	t.Logf("Start returned after %v: %v", r.Took.Round(time.Millisecond), err)
	return r
}

// WantStartWaits starts a bus on p, a store whose server comes up at addr
// (LateService) after lateBy, and fails t unless Start succeeds after the
// server came up and within timeout, having logged at Warn that the
// store at addr was unreachable.
func WantStartWaits(t testing.TB, p bus.Persistence, addr string, lateBy, timeout time.Duration) {
	t.Helper()
	r := StartStore(t, p, timeout)
	if r.Err != nil {
		t.Fatalf("Start with the store up %v late = %v after %v, want success within StartTimeout %v", lateBy, r.Err, r.Took, timeout)
	}
	if r.Took < lateBy-500*time.Millisecond { // timers are not exact to the millisecond
		t.Errorf("Start succeeded after %v, before the store came up (%v)", r.Took, lateBy)
	}
	warned := false
	for line := range strings.Lines(r.Log) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, addr) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no Warn line naming %s in the log:\n%s", addr, r.Log)
	}
}

// WantStartFailsAtOnce starts a bus on p, a store whose server refuses
// what it is asked (wrong password, unknown database), and fails t unless
// Start fails well before timeout with an error that does not match
// bus.ErrStoreUnavailable but names want. It returns Start's error.
func WantStartFailsAtOnce(t testing.TB, p bus.Persistence, timeout time.Duration, want string) error {
	t.Helper()
	r := StartStore(t, p, timeout)
	switch {
	case r.Err == nil:
		t.Fatalf("Start succeeded after %v, want a permanent error", r.Took)
	case errors.Is(r.Err, bus.ErrStoreUnavailable) || errors.Is(r.Err, bus.ErrStartTimeout):
		t.Errorf("Start = %v, want a permanent error, not bus.ErrStoreUnavailable", r.Err)
	case r.Took > timeout/2:
		t.Errorf("Start failed after %v, want at once (StartTimeout %v)", r.Took, timeout)
	}
	if !strings.Contains(r.Err.Error(), want) {
		t.Errorf("Start = %v, want it to say %q", r.Err, want)
	}
	return r.Err
}

// WantStartUnavailable starts a bus on p, a store whose server never
// comes up, and fails t unless Start fails after timeout with an error
// matching bus.ErrStoreUnavailable and bus.ErrStartTimeout. It returns
// Start's error.
func WantStartUnavailable(t testing.TB, p bus.Persistence, timeout time.Duration) error {
	t.Helper()
	r := StartStore(t, p, timeout)
	switch {
	case r.Err == nil:
		t.Fatalf("Start succeeded after %v with the store down", r.Took)
	case !errors.Is(r.Err, bus.ErrStoreUnavailable) || !errors.Is(r.Err, bus.ErrStartTimeout):
		t.Errorf("Start = %v, want bus.ErrStoreUnavailable and bus.ErrStartTimeout", r.Err)
	case r.Took < timeout:
		t.Errorf("Start gave up after %v, before StartTimeout %v", r.Took, timeout)
	}
	return r.Err
}

package bustest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// DeadAddr returns a loopback address ("127.0.0.1:port") nothing listens
// on: a port that was listened on and closed, so connecting to it is
// refused at once. Tests of a broker that is down dial it.
func DeadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	return addr
}

// StartWithBrokerDown starts a bus on tr, a transport whose broker is
// down, with Config.StartTimeout timeout and context.Background(), and
// fails the test unless Start returns an error within timeout (generously
// bounded: timeout + 30 s). A transport that waits for its broker ends
// with an error matching bus.ErrStartTimeout; one that gives up sooner
// may return its own. It returns Start's error for further checks.
func StartWithBrokerDown(t testing.TB, tr bus.Transport, timeout time.Duration) error {
	t.Helper()
	b, err := bus.New(bus.Config{Endpoint: "start-times-out", Transport: tr, StartTimeout: timeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- b.Start(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(timeout + 30*time.Second):
		t.Fatalf("Start with the broker down did not return within StartTimeout %v + 30 s", timeout)
	}
	took := time.Since(began)
	switch {
	case err == nil:
		t.Fatalf("Start with the broker down succeeded after %v", took)
	case errors.Is(err, bus.ErrStartTimeout) && took < timeout:
		t.Fatalf("Start = %v after %v, before StartTimeout %v", err, took, timeout)
	}
	t.Logf("Start with the broker down returned after %v: %v", took.Round(time.Millisecond), err)
	return err
}

package nats_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// runServer starts an embedded JetStream server on 127.0.0.1 with its store
// in dir; port 0 picks a free port.
func runServer(t *testing.T, dir string, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, ServerName: "postbus-restart-test",
	})
	if err != nil {
		t.Fatalf("embedded server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("embedded server not ready within 10s")
	}
	return s
}

// TestServerRestartLosesNothing restarts the server (same store, same port)
// while messages are being sent and handled: the connection reconnects,
// Receive resumes, and every message is handled.
func TestServerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := runServer(t, dir, 0)
	port := s.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc := connect(t, s.ClientURL())
	opts := uniqueOptions()
	opts.AckWait = 5 * time.Second
	tr := mustNew(t, nc, opts)
	const queue, n = "restart", 400
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	r := startReceive(t, tr, queue, 4, nil)

	ids := make([]string, n)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			env := command(queue, i)
			ids[i] = env.ID
			for attempt := 0; ; attempt++ { // a send during the outage fails; resend the same message
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := tr.Send(ctx, queue, env)
				cancel()
				if err == nil {
					break
				}
				if attempt > 100 {
					t.Errorf("Send %d still failing: %v", i, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(time.Millisecond) // spread the sends over the restart

		}
	}()
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.distinct() >= n/4 }, "some messages before the restart")
	s.Shutdown()
	s.WaitForShutdown()
	t.Logf("server stopped after %d messages handled", r.distinct())
	s = runServer(t, dir, port)
	<-sent
	drivertest.Eventually(t, 60*time.Second, func() bool { return r.distinct() == n }, "every message after the restart")
	r.stop(t)
	dups := 0
	for _, id := range ids {
		switch c := r.count(id); {
		case c == 0:
			t.Errorf("message %s lost", id)
		case c > 1:
			dups += c - 1
		}
	}
	t.Logf("%d messages, %d redeliveries across the restart", n, dups)
}

package nats_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// asRetry returns the copy of env a caller's retry of the same Send would
// produce: same ID, but stamped again (sent at, expiry and timers move on).
func asRetry(env *bus.Envelope) *bus.Envelope {
	retry := env.Clone()
	retry.SentAt = env.SentAt.Add(1500 * time.Millisecond)
	retry.ExpiresAt = retry.SentAt.Add(time.Hour)
	retry.SetHeader("postbus.timer.reach-queue-by", retry.SentAt.Add(time.Minute).Format(time.RFC3339Nano))
	return retry
}

// TestNATSRetryAfterFailedSendIsStoredOnce sends the same envelope twice,
// the second time stamped again as a caller's retry would be: the stream
// keeps one copy and the queue hands it over once.
func TestNATSRetryAfterFailedSendIsStoredOnce(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	const queue = "retried"
	env := command(queue, 1)
	env.ExpiresAt = env.SentAt.Add(time.Hour)
	env.SetHeader("postbus.timer.reach-queue-by", env.SentAt.Add(time.Minute).Format(time.RFC3339Nano))
	if err := tr.Send(drivertest.Ctx(t, 0), queue, env); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := tr.Send(drivertest.Ctx(t, 0), queue, asRetry(env)); err != nil {
		t.Fatalf("retried Send: %v", err)
	}
	if got := streamMsgs(t, nc, opts); got != 1 {
		t.Fatalf("stream holds %d copies of one message sent and retried, want 1", got)
	}
	expectHandledOnce(t, tr, nc, opts, queue, env.ID)
}

// TestNATSFailedPublishNeverLandsLater sends while the server is down, on a
// connection with nats.go's default reconnect buffer: the Send fails, and
// once the connection is back nothing of it reaches the stream. The
// caller's retry is then handled exactly once.
func TestNATSFailedPublishNeverLandsLater(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := runServer(t, dir, 0)
	port := s.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc := connect(t, s.ClientURL())
	opts := uniqueOptions()
	tr := mustNew(t, nc, opts)
	const queue = "cut"
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue, Queues: []string{"warm-up"}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Send(drivertest.Ctx(t, 0), "warm-up", command("warm-up", 0)); err != nil {
		t.Fatalf("Send before the cut: %v", err)
	}

	s.Shutdown()
	s.WaitForShutdown()
	drivertest.Eventually(t, 30*time.Second, func() bool { return !nc.IsConnected() }, "the client to notice the cut")
	env := command(queue, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := tr.Send(ctx, queue, env)
	cancel()
	if !errors.Is(err, nats.ErrNoAck) {
		t.Fatalf("Send with the server down: %v, want ErrNoAck", err)
	}
	t.Logf("Send during the cut: %v", err)

	s = runServer(t, dir, port)
	drivertest.Eventually(t, 30*time.Second, nc.IsConnected, "the client to reconnect")
	if err := nc.FlushTimeout(10 * time.Second); err != nil { // whatever the client buffered has reached the server
		t.Fatalf("flush: %v", err)
	}
	if info := consumerInfo(t, nc, opts, queue); info.NumPending != 0 {
		t.Fatalf("the failed Send reached the stream after the reconnect: %d pending", info.NumPending)
	}

	if err := tr.Send(drivertest.Ctx(t, 0), queue, asRetry(env)); err != nil {
		t.Fatalf("the caller's retry: %v", err)
	}
	expectHandledOnce(t, tr, nc, opts, queue, env.ID)
	if got := streamLastSeq(t, nc, opts); got != 2 {
		t.Errorf("the stream stored %d messages, want 2 (the warm-up and one copy)", got)
	}
}

// TestNATSSendWhoseAckWasLostReportsSuccess stores a message while the
// stream's acknowledgement cannot reach the client, then breaks the
// connection: the message is in the stream, so Send must not report a
// failure (the caller would send it again); it learns the outcome after
// the reconnect and returns nil. The stream keeps one copy.
func TestNATSSendWhoseAckWasLostReportsSuccess(t *testing.T) {
	t.Parallel()
	s := runServer(t, t.TempDir(), 0)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	p := startProxy(t, s.Addr().String())
	nc := connect(t, p.URL())
	direct := connect(t, s.ClientURL()) // watches the stream past the proxy
	opts := uniqueOptions()
	tr := mustNew(t, nc, opts)
	const queue = "lost-ack"
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue, Queues: []string{"warm-up"}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Send(drivertest.Ctx(t, 0), "warm-up", command("warm-up", 0)); err != nil {
		t.Fatalf("Send before the fault: %v", err)
	}

	p.muted.Store(true)
	env := command(queue, 1)
	sent := make(chan error, 1)
	go func() { sent <- tr.Send(drivertest.Ctx(t, 0), queue, env) }()
	drivertest.Eventually(t, 30*time.Second, func() bool {
		return consumerInfo(t, direct, opts, queue).NumPending == 1
	}, "the stream to store the message")
	p.muted.Store(false)
	p.cut()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("Send of a message the stream stored, whose ack was lost: %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Send did not return within 60s of the reconnect")
	}
	if got := streamLastSeq(t, direct, opts); got != 2 {
		t.Errorf("the stream stored %d messages, want 2 (the warm-up and one copy)", got)
	}
}

type replayPing struct{ N int }

// TestNATSReplayIsNotSwallowedAsDuplicate moves two messages to the error
// queue and replays them at once, well within the duplicate window: the
// replayed one is handled again, and the one the filter passed over stays
// in the error queue. Both are re-sends of an envelope ID the stream has
// seen moments before.
func TestNATSReplayIsNotSwallowedAsDuplicate(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	ns := bustest.Namespace()
	endpoint, errorQueue := ns+"-orders", ns+"-error"
	var failing atomic.Bool
	failing.Store(true)
	rec := bustest.NewRecorder[replayPing]()
	b := bustest.StartBus(t, bus.Config{Endpoint: endpoint, Transport: tr, ErrorQueue: errorQueue}, func(b *bus.Bus) {
		if err := bus.Handle(b, func(ctx context.Context, m replayPing) error {
			if failing.Load() {
				return bus.Unrecoverable(errors.New("not yet"))
			}
			return rec.Handler(ctx, m)
		}); err != nil {
			t.Fatal(err)
		}
		if err := bus.Route[replayPing](b, endpoint); err != nil {
			t.Fatal(err)
		}
	})
	for n := range 2 {
		if err := b.Send(drivertest.Ctx(t, 0), replayPing{N: n + 1}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	drivertest.Eventually(t, 30*time.Second, func() bool {
		info := consumerInfo(t, nc, opts, errorQueue)
		return info.NumPending == 2 && info.NumAckPending == 0
	}, "both messages in the error queue")
	failing.Store(false)
	moved, err := b.Replay(drivertest.Ctx(t, 0), bus.ReplayOptions{
		Filter: func(env *bus.Envelope) bool { return strings.Contains(string(env.Body), `"N":1`) },
	})
	if err != nil || moved != 1 {
		t.Fatalf("Replay = %d, %v; want 1 moved", moved, err)
	}
	rec.WaitFor(t, 1)
	if m := rec.Messages()[0]; m.N != 1 {
		t.Errorf("handled %+v, want the replayed N=1", m)
	}
	drivertest.Eventually(t, 30*time.Second, func() bool {
		info := consumerInfo(t, nc, opts, endpoint)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "the replayed message to be acknowledged")
	if got := streamMsgs(t, nc, opts); got != 1 {
		t.Errorf("the stream holds %d messages after the replay, want 1: the one the filter passed over, back in the error queue", got)
	}
}

// expectHandledOnce receives queue until the message id was handled and
// acknowledged, and fails the test unless it was handled exactly once.
func expectHandledOnce(t *testing.T, tr *nats.Transport, nc *natsio.Conn, opts nats.Options, queue, id string) {
	t.Helper()
	r := startReceive(t, tr, queue, 1, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.count(id) >= 1 }, "the message")
	drivertest.Eventually(t, 30*time.Second, func() bool {
		info := consumerInfo(t, nc, opts, queue)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "its ack")
	r.stop(t)
	if c := r.count(id); c != 1 {
		t.Errorf("handled %d times, want exactly once", c)
	}
}

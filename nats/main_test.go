package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverURL is the JetStream server the integration tests use.
func serverURL() string { return drivertest.Addr("POSTBUS_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// connect opens a connection that reconnects forever, or skips the test
// when the server is absent (fails under CI=true).
func connect(t testing.TB, url string) *natsio.Conn {
	t.Helper()
	nc, err := natsio.Connect(url,
		natsio.MaxReconnects(-1),
		natsio.ReconnectWait(50*time.Millisecond),
		natsio.Timeout(2*time.Second))
	if err != nil {
		bustest.SkipOutsideCI(t, "NATS JetStream server at %s unreachable (set POSTBUS_TEST_NATS_URL): %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// uniqueOptions returns Options with a stream and subject prefix of their
// own, so tests never share them, even across checkouts on one server.
func uniqueOptions() nats.Options {
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	return nats.Options{
		Stream:        "PBTEST_" + suffix,
		SubjectPrefix: "pbtest." + suffix,
		Logger:        drivertest.Logger(),
	}
}

// namespace returns uniqueOptions and deletes the stream (with its
// consumers) when the test ends.
func namespace(t testing.TB, nc *natsio.Conn) nats.Options {
	t.Helper()
	opts := uniqueOptions()
	t.Cleanup(func() {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, opts.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("cleanup: delete stream %s: %v", opts.Stream, err)
		}
	})
	return opts
}

// newTransport connects and returns a transport in a fresh namespace.
func newTransport(t testing.TB) (*nats.Transport, *natsio.Conn, nats.Options) {
	t.Helper()
	nc := connect(t, serverURL())
	opts := namespace(t, nc)
	tr := mustNew(t, nc, opts)
	return tr, nc, opts
}

func mustNew(t testing.TB, nc *natsio.Conn, opts nats.Options) *nats.Transport {
	t.Helper()
	tr, err := nats.New(nc, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// receiver runs Receive in the background and records what arrived.
type receiver struct {
	mu     sync.Mutex
	got    map[string]int // ID -> deliveries
	envs   map[string]*bus.Envelope
	cancel context.CancelFunc
	done   chan error
}

// startReceive consumes queue until the test ends or stop is called; h (if
// not nil) decides each outcome after the delivery was recorded.
func startReceive(t testing.TB, tr *nats.Transport, queue string, conc int, h bus.DeliveryHandler) *receiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &receiver{got: map[string]int{}, envs: map[string]*bus.Envelope{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: conc}, func(ctx context.Context, env *bus.Envelope) error {
			r.mu.Lock()
			r.got[env.ID]++
			r.envs[env.ID] = env
			r.mu.Unlock()
			if h != nil {
				return h(ctx, env)
			}
			return nil
		})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Receive and waits for it to return.
func (r *receiver) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Receive returned %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("Receive did not return within 30s of its context ending")
	}
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// command makes a small envelope with a unique ID.
func command(queue string, i int) *bus.Envelope {
	return &bus.Envelope{
		ID: drivertest.ID(), Type: "test.Cmd", Kind: bus.KindCommand, Body: fmt.Appendf(nil, `{"n":%d}`, i),
		ContentType: "application/json", Destination: queue, Source: "tests", SentAt: time.Now().UTC(),
	}
}

// consumerInfo reads a queue consumer's state on the server.
func consumerInfo(t testing.TB, nc *natsio.Conn, opts nats.Options, name string) *jetstream.ConsumerInfo {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(drivertest.Ctx(t, 0), opts.Stream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(drivertest.Ctx(t, 0))
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return info
}

// streamMsgs returns how many messages the stream holds.
func streamMsgs(t testing.TB, nc *natsio.Conn, opts nats.Options) uint64 {
	t.Helper()
	return streamState(t, nc, opts).Msgs
}

// streamLastSeq returns how many messages the stream ever stored.
func streamLastSeq(t testing.TB, nc *natsio.Conn, opts nats.Options) uint64 {
	t.Helper()
	return streamState(t, nc, opts).LastSeq
}

func streamState(t testing.TB, nc *natsio.Conn, opts nats.Options) jetstream.StreamState {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(drivertest.Ctx(t, 0), opts.Stream)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(drivertest.Ctx(t, 0))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State
}

package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// maxTestPayload is the largest body the suite sends: the server's default
// max_payload is 1 MiB for the whole message, headers included.
const maxTestPayload = 1<<20 - 16<<10

func TestConformance(t *testing.T) {
	t.Parallel()
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		tr, _, _ := newTransport(t)
		return tr
	}, bustest.Features{NativeRedelivery: true, MaxMessageSize: maxTestPayload})
}

// fullEnvelope sets every field, with values that need escaping.
func fullEnvelope(kind bus.Kind, typ, dest string) *bus.Envelope {
	return &bus.Envelope{
		ID: drivertest.ID(), Type: typ, Kind: kind, Body: []byte("body\x00with\r\nbytes"),
		ContentType: "application/json; charset=utf-8",
		Headers: map[string]string{
			"postbus.reply-to": "sales", "X-Case": "Mixed", "empty": "", "multi\nline key": " leading and trailing ",
			"percent": "100%", "unicode": "ñandú → 東京", "under_score": "a_b",
		},
		CorrelationID:    "corr/1 2",
		Attributes:       map[string]string{"tenant": "acme", "a.b": "c:d"},
		StickyAttributes: map[string]string{"trace": "t\t1"},
		Source:           "orders", Destination: dest,
		SentAt:    time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC),
		DueAt:     time.Date(2031, 3, 4, 5, 6, 9, 1, time.UTC),
		ExpiresAt: time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

func assertSameEnvelope(t *testing.T, got, want *bus.Envelope) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.Kind != want.Kind || string(got.Body) != string(want.Body) ||
		got.ContentType != want.ContentType || got.CorrelationID != want.CorrelationID ||
		got.Source != want.Source || got.Destination != want.Destination {
		t.Errorf("scalar fields differ:\n got %+v\nwant %+v", got, want)
	}
	for _, tm := range [...]struct {
		name      string
		got, want time.Time
	}{{"SentAt", got.SentAt, want.SentAt}, {"DueAt", got.DueAt, want.DueAt}, {"ExpiresAt", got.ExpiresAt, want.ExpiresAt}} {
		if !tm.got.Equal(tm.want) {
			t.Errorf("%s = %v, want %v", tm.name, tm.got, tm.want)
		}
	}
	for _, m := range [...]struct {
		name      string
		got, want map[string]string
	}{{"Headers", got.Headers, want.Headers}, {"Attributes", got.Attributes, want.Attributes}, {"StickyAttributes", got.StickyAttributes, want.StickyAttributes}} {
		if !maps.Equal(m.got, m.want) {
			t.Errorf("%s = %q, want %q", m.name, m.got, m.want)
		}
	}
}

func TestRoundTripEveryField(t *testing.T) {
	t.Parallel()
	tr, _, _ := newTransport(t)
	const queue = "sales/orders v2"
	typ := "github.com/acme/sales.OrderPlaced"
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue, Events: []string{typ}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	cmd := fullEnvelope(bus.KindCommand, "github.com/acme/sales.PlaceOrder", queue)
	evt := fullEnvelope(bus.KindEvent, typ, "")
	if err := tr.Send(drivertest.Ctx(t, 0), queue, cmd); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := tr.Publish(drivertest.Ctx(t, 0), evt); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	r := startReceive(t, tr, queue, 2, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.distinct() == 2 }, "both messages")
	r.stop(t)
	assertSameEnvelope(t, r.envs[cmd.ID], cmd)
	assertSameEnvelope(t, r.envs[evt.ID], evt)
}

func TestPublishReachesEachSubscriberOnce(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	const typ = "acme.Shipped"
	for _, q := range []string{"a", "b"} {
		if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: q, Events: []string{typ, "acme.Other"}}); err != nil {
			t.Fatalf("Provision %s: %v", q, err)
		}
	}
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: "c", Events: []string{"acme.Other"}}); err != nil {
		t.Fatalf("Provision c: %v", err)
	}
	const n = 50
	ids := make([]string, n)
	for i := range n {
		env := command("", i)
		env.Type, env.Kind = typ, bus.KindEvent
		ids[i] = env.ID
		if err := tr.Publish(drivertest.Ctx(t, 0), env); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	ra, rb := startReceive(t, tr, "a", 4, nil), startReceive(t, tr, "b", 4, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return ra.distinct() == n && rb.distinct() == n }, "every event at both subscribers")
	ra.stop(t)
	rb.stop(t)
	for _, id := range ids {
		if ra.count(id) != 1 || rb.count(id) != 1 {
			t.Errorf("event %s delivered %d times to a, %d to b; want once each", id, ra.count(id), rb.count(id))
		}
	}
	if info := consumerInfo(t, nc, opts, "c"); info.NumPending != 0 || info.Delivered.Stream != 0 {
		t.Errorf("non-subscriber c has %d pending, %d delivered", info.NumPending, info.Delivered.Stream)
	}
	if got := streamMsgs(t, nc, opts); got != 0 {
		t.Errorf("stream keeps %d messages after every subscriber acked", got)
	}
	// An event with no subscriber is accepted and dropped.
	env := command("", 0)
	env.Type = "acme.NobodyListens"
	if err := tr.Publish(drivertest.Ctx(t, 0), env); err != nil {
		t.Fatalf("Publish without subscribers: %v", err)
	}
}

func TestCompetingConsumersHandleEachMessageOnce(t *testing.T) {
	t.Parallel()
	tr1, _, opts := newTransport(t)
	tr2 := mustNew(t, connect(t, serverURL()), opts) // a second process
	const queue, n = "work", 300
	if err := tr1.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	slow := func(context.Context, *bus.Envelope) error { time.Sleep(time.Millisecond); return nil }
	r1, r2 := startReceive(t, tr1, queue, 3, slow), startReceive(t, tr2, queue, 3, slow)
	ids := sendN(t, tr1, queue, n)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r1.distinct()+r2.distinct() >= n }, "all messages")
	r1.stop(t)
	r2.stop(t)
	for _, id := range ids {
		if c := r1.count(id) + r2.count(id); c != 1 {
			t.Errorf("message %s handled %d times", id, c)
		}
	}
	if r1.distinct() == 0 || r2.distinct() == 0 {
		t.Errorf("work not shared: %d and %d", r1.distinct(), r2.distinct())
	}
}

func sendN(t *testing.T, tr *nats.Transport, queue string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		env := command(queue, i)
		ids[i] = env.ID
		if err := tr.Send(drivertest.Ctx(t, 0), queue, env); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	return ids
}

func TestNakRedelivers(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	const queue = "flaky"
	var fails atomic.Int64
	r := startReceive(t, tr, queue, 2, func(_ context.Context, env *bus.Envelope) error {
		if fails.Add(1) <= 2 {
			return errors.New("transient")
		}
		return nil
	})
	ids := sendN(t, tr, queue, 1)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.count(ids[0]) == 3 }, "third delivery")
	drivertest.Eventually(t, 30*time.Second, func() bool {
		info := consumerInfo(t, nc, opts, queue)
		return info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0
	}, "ack to settle")
	r.stop(t)
	if c := r.count(ids[0]); c != 3 {
		t.Errorf("delivered %d times, want 3 (two naks, one ack)", c)
	}
}

func TestStopWithMessagesInFlightLosesNone(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	const queue, n = "stopping", 60
	ids := sendN(t, tr, queue, n)
	var mu sync.Mutex
	acked := map[string]int{}
	gate := make(chan struct{})
	started := make(chan struct{}, n)
	h := func(_ context.Context, env *bus.Envelope) error {
		started <- struct{}{}
		<-gate
		mu.Lock()
		acked[env.ID]++
		mu.Unlock()
		return nil
	}
	first := startReceive(t, tr, queue, 4, h)
	for range 4 {
		<-started // four handlers in flight, more messages buffered
	}
	first.cancel()
	time.AfterFunc(50*time.Millisecond, func() { close(gate) }) // finish after the stop began
	first.stop(t)
	if got := len(acked); got != 4 {
		t.Fatalf("first receiver finished %d messages, want the 4 in flight", got)
	}
	settled := maps.Clone(acked)
	second := startReceive(t, tr, queue, 4, h)
	drivertest.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == n
	}, "the rest")
	second.stop(t)
	dups := 0
	for _, id := range ids {
		switch {
		case acked[id] == 0:
			t.Errorf("message %s lost", id)
		case settled[id] > 0 && acked[id] > 1:
			t.Errorf("message %s settled by the stopped receiver was handled again", id)
		case acked[id] > 1:
			dups++ // at least once: a delivery racing the stop may come again
		}
	}
	t.Logf("%d duplicates", dups)
	if info := consumerInfo(t, nc, opts, queue); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("consumer still has %d unacked, %d pending", info.NumAckPending, info.NumPending)
	}
}

func TestResendIsDeduplicatedPerDestination(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	env := command("q1", 1)
	for range 3 {
		if err := tr.Send(drivertest.Ctx(t, 0), "q1", env); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if got := streamMsgs(t, nc, opts); got != 1 {
		t.Fatalf("stream holds %d copies after three sends of one message, want 1", got)
	}
	// The same message to another queue (the error queue, say) is not a duplicate.
	if err := tr.Send(drivertest.Ctx(t, 0), "q2", env); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := streamMsgs(t, nc, opts); got != 2 {
		t.Fatalf("stream holds %d messages, want 2", got)
	}
	r := startReceive(t, tr, "q1", 1, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.count(env.ID) == 1 }, "the message")
	drivertest.Eventually(t, 30*time.Second, func() bool { return consumerInfo(t, nc, opts, "q1").NumAckPending == 0 }, "ack")
	r.stop(t)
	if c := r.count(env.ID); c != 1 {
		t.Errorf("delivered %d times, want 1", c)
	}
}

func TestSendBeforeReceiverExistsIsKept(t *testing.T) {
	t.Parallel()
	tr, _, opts := newTransport(t)
	ids := sendN(t, tr, "later", 5)
	// The receiving endpoint starts afterwards, in another process, and
	// subscribes to an event too: its Provision must keep the queued commands.
	tr2 := mustNew(t, connect(t, serverURL()), opts)
	if err := tr2.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: "later", Events: []string{"x.Evt"}}); err != nil {
		t.Fatal(err)
	}
	r := startReceive(t, tr2, "later", 2, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.distinct() == len(ids) }, "queued commands")
}

func TestUndecodableMessageReachesHandler(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: "raw"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(drivertest.Ctx(t, 0), opts.SubjectPrefix+".q.raw", []byte("from another tool")); err != nil {
		t.Fatal(err)
	}
	got := make(chan *bus.Envelope, 1)
	startReceive(t, tr, "raw", 1, func(_ context.Context, env *bus.Envelope) error { got <- env; return nil })
	select {
	case env := <-got:
		if string(env.Body) != "from another tool" || env.Headers[bus.HeaderDecodeError] == "" {
			t.Errorf("got body %q headers %v, want the raw body and %s", env.Body, env.Headers, bus.HeaderDecodeError)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("undecodable message never reached the handler")
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	tr, _, _ := newTransport(t)
	if err := tr.Send(drivertest.Ctx(t, 0), "", command("", 1)); !errors.Is(err, nats.ErrInvalidName) {
		t.Errorf("Send to empty queue: %v, want ErrInvalidName", err)
	}
	if err := tr.Publish(drivertest.Ctx(t, 0), &bus.Envelope{ID: "x"}); !errors.Is(err, nats.ErrInvalidName) {
		t.Errorf("Publish without type: %v, want ErrInvalidName", err)
	}
	err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Events: []string{"a.B"}})
	drivertest.TypedError[*nats.NameError](t, err, nats.ErrInvalidName, `nats: invalid queue "": events need a queue to be delivered to`)
	err = tr.Receive(drivertest.Ctx(t, 0), "sales", bus.ReceiveOptions{}, nil)
	drivertest.TypedError[*nats.NameError](t, err, nats.ErrInvalidName, `nats: invalid handler "sales": must not be nil`)
	nc := connect(t, serverURL())
	for _, o := range []nats.Options{
		{Stream: "has.dot"}, {SubjectPrefix: "wild.*"}, {SubjectPrefix: "a..b"}, {AckWait: time.Millisecond}, {Replicas: 9},
		{DuplicateWindow: time.Second}, {DuplicateWindow: time.Minute, PublishTimeout: 2 * time.Minute},
	} {
		var oe *nats.OptionsError
		if _, err := nats.New(nc, o); !errors.As(err, &oe) || !errors.Is(err, nats.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want an *OptionsError", o, err)
		}
	}
	_, err = nats.New(nil, nats.Options{})
	drivertest.TypedError[*nats.OptionsError](t, err, nats.ErrInvalidOptions, "nats: invalid options: nc: connection must not be nil")
}

func TestSendHonoursContext(t *testing.T) {
	t.Parallel()
	tr, _, _ := newTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.Send(ctx, "q", command("q", 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Send with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestNewWarnsAboutReconnectBuffer: a connection that buffers publishes
// while reconnecting gets a warning naming the fix; one without does not.
func TestNewWarnsAboutReconnectBuffer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts []natsio.Option
		warn bool
	}{
		{"default buffer", nil, true},
		{"no buffer", []natsio.Option{natsio.ReconnectBufSize(-1)}, false},
	} {
		nc, err := natsio.Connect(serverURL(), c.opts...)
		if err != nil {
			bustest.SkipOutsideCI(t, "NATS JetStream server at %s unreachable: %v", serverURL(), err)
		}
		var logs strings.Builder
		opts := uniqueOptions()
		opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		tr, err := nats.New(nc, opts)
		if err != nil {
			t.Fatalf("%s: New: %v", c.name, err)
		}
		_ = tr.Close()
		nc.Close()
		if got := strings.Contains(logs.String(), "ReconnectBufSize(-1)"); got != c.warn {
			t.Errorf("%s: warned %v, want %v; logs: %s", c.name, got, c.warn, logs.String())
		}
	}
}

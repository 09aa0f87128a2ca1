package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

const orderPlaced = "github.com/acme/sales.OrderPlaced"

// fullEnvelope sets every field, with values that stress the mapping.
func fullEnvelope() *bus.Envelope {
	loc := time.FixedZone("UTC+5:30", 5*3600+1800)
	return &bus.Envelope{
		ID:               "0190a6f2-7c1e-7b3a-9f00-0123456789ab",
		Type:             "github.com/acme/sales.PlaceOrder[github.com/acme/x.T]",
		Kind:             bus.KindReply,
		Body:             append([]byte{0, 1, 2, 0xff}, []byte(`{"order":"ü 42"}`)...),
		ContentType:      "application/json; charset=utf-8",
		Headers:          map[string]string{"postbus.reply-to": "sales", "x-custom": "v", "": "empty key", "unicode ✓": "värde\x00nul"},
		CorrelationID:    "corr-1",
		Attributes:       map[string]string{"tenant": "acme", "empty": ""},
		StickyAttributes: map[string]string{"trace": "abc", "user": "u-1"},
		Source:           "billing",
		Destination:      "sales",
		SentAt:           time.Date(2026, 3, 4, 5, 6, 7, 123456789, loc),
		DueAt:            time.Date(2026, 3, 4, 5, 6, 9, 1, time.UTC),
		ExpiresAt:        time.Date(2099, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
}

func assertSameEnvelope(t *testing.T, got, want *bus.Envelope) {
	t.Helper()
	check := func(field string, ok bool, g, w any) {
		if !ok {
			t.Errorf("%s: got %#v, want %#v", field, g, w)
		}
	}
	check("ID", got.ID == want.ID, got.ID, want.ID)
	check("Type", got.Type == want.Type, got.Type, want.Type)
	check("Kind", got.Kind == want.Kind, got.Kind, want.Kind)
	check("Body", bytes.Equal(got.Body, want.Body), got.Body, want.Body)
	check("ContentType", got.ContentType == want.ContentType, got.ContentType, want.ContentType)
	check("Headers", maps.Equal(got.Headers, want.Headers), got.Headers, want.Headers)
	check("CorrelationID", got.CorrelationID == want.CorrelationID, got.CorrelationID, want.CorrelationID)
	check("Attributes", maps.Equal(got.Attributes, want.Attributes), got.Attributes, want.Attributes)
	check("StickyAttributes", maps.Equal(got.StickyAttributes, want.StickyAttributes), got.StickyAttributes, want.StickyAttributes)
	check("Source", got.Source == want.Source, got.Source, want.Source)
	check("Destination", got.Destination == want.Destination, got.Destination, want.Destination)
	check("SentAt", got.SentAt.Equal(want.SentAt), got.SentAt, want.SentAt)
	check("DueAt", got.DueAt.Equal(want.DueAt), got.DueAt, want.DueAt)
	check("ExpiresAt", got.ExpiresAt.Equal(want.ExpiresAt), got.ExpiresAt, want.ExpiresAt)
}

// collect receives from queue into a channel.
func collect(t *testing.T, tr *rabbitmq.Transport, queue string) (<-chan *bus.Envelope, func()) {
	got := make(chan *bus.Envelope, 100)
	stop := receive(t, tr, queue, 2, func(_ context.Context, env *bus.Envelope) error {
		got <- env
		return nil
	})
	return got, stop
}

func next(t *testing.T, ch <-chan *bus.Envelope) *bus.Envelope {
	t.Helper()
	select {
	case env := <-ch:
		return env
	case <-time.After(15 * time.Second):
		t.Fatal("no message within 15s")
		return nil
	}
}

func TestSendReceiveRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	_, tr, q := provisionedQueue(t, "sales")
	got, _ := collect(t, tr, q)

	for _, want := range []*bus.Envelope{fullEnvelope(), {ID: "minimal"}, {Kind: 7, Body: []byte{}}} {
		if err := tr.Send(ctxT(t, 10*time.Second), q, want); err != nil {
			t.Fatal(err)
		}
		env := next(t, got)
		assertSameEnvelope(t, env, want)
		if _, ok := env.Headers[bus.HeaderDecodeError]; ok {
			t.Errorf("decode error on a Postbus message: %v", env.Headers)
		}
	}
}

func TestPublishReachesEverySubscribedQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	a, b, other := e.queue("a"), e.queue("b"), e.queue("other")
	e.provision(tr, bus.Topology{Queue: a, Events: []string{orderPlaced}})
	e.provision(tr, bus.Topology{Queue: b, Events: []string{orderPlaced, "github.com/acme/sales.OrderShipped"}})
	e.provision(tr, bus.Topology{Queue: other, Events: []string{"github.com/acme/sales.Order"}})

	want := fullEnvelope()
	want.Type, want.Kind, want.Destination = orderPlaced, bus.KindEvent, ""
	if err := tr.Publish(ctxT(t, 10*time.Second), want); err != nil {
		t.Fatal(err)
	}
	// No subscriber: not an error.
	if err := tr.Publish(ctxT(t, 10*time.Second), newEnvelope("github.com/acme/nobody.Cares", nil)); err != nil {
		t.Fatalf("publish without subscribers: %v", err)
	}
	for _, q := range []string{a, b} {
		got, stop := collect(t, tr, q)
		assertSameEnvelope(t, next(t, got), want)
		stop()
		if n := e.ready(q); n != 0 {
			t.Errorf("%s: %d more messages, want 0", q, n)
		}
	}
	if n := e.ready(other); n != 0 {
		t.Errorf("unsubscribed queue got %d messages", n)
	}
}

func TestSendToMissingQueueIsUnroutable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	err := tr.Send(ctxT(t, 10*time.Second), e.prefix+"does-not-exist", newEnvelope("T", nil))
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("got %v, want ErrUnroutable", err)
	}
	// Receive cannot consume a missing queue at all: an error, not a wait.
	err = tr.Receive(ctxT(t, 10*time.Second), e.prefix+"does-not-exist", bus.ReceiveOptions{},
		func(context.Context, *bus.Envelope) error { return nil })
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("receive from a missing queue: got %v, want NOT_FOUND", err)
	}
	// The channel is still usable afterwards.
	q := e.queue("q")
	e.provision(tr, bus.Topology{Queue: q})
	if err := tr.Send(ctxT(t, 10*time.Second), q, newEnvelope("T", nil)); err != nil {
		t.Fatal(err)
	}
}

// Sends to an existing and a missing queue, pipelined on the same channels
// and even with the same message ID: only the sends to the missing queue
// fail, so returns are matched to the right publishes.
func TestUnroutableSendsAreToldApartUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	opts := e.options()
	opts.PublisherChannels = 1
	tr := e.transport(opts)
	q := e.queue("exists")
	e.provision(tr, bus.Topology{Queue: q})
	missing := e.prefix + "missing"
	const n = 200
	var wg sync.WaitGroup
	var okCount, unroutable atomic.Int64
	for i := range n {
		env := newEnvelope("T", nil)
		env.ID = fmt.Sprint("same-", i/2) // pairs share an ID
		dest := q
		if i%2 == 1 {
			dest = missing
		}
		wg.Go(func() {
			err := tr.Send(ctxT(t, 30*time.Second), dest, env)
			switch {
			case dest == q && err == nil:
				okCount.Add(1)
			case dest == missing && errors.Is(err, rabbitmq.ErrUnroutable):
				unroutable.Add(1)
			default:
				t.Errorf("send to %s: %v", dest, err)
			}
		})
	}
	wg.Wait()
	if okCount.Load() != n/2 || unroutable.Load() != n/2 {
		t.Errorf("%d ok, %d unroutable; want %d each", okCount.Load(), unroutable.Load(), n/2)
	}
	if r := e.ready(q); r != n/2 {
		t.Errorf("%d messages in the queue, want %d", r, n/2)
	}
}

func TestCompetingConsumersGetEachMessageOnce(t *testing.T) {
	t.Parallel()
	e, tr, q := provisionedQueue(t, "work")
	const n = 300
	var mu sync.Mutex
	seen := map[string]int{}
	perConsumer := [2]int{}
	var total atomic.Int64
	var stops []func()
	for i := range 2 {
		tr2 := tr
		if i == 1 { // the other consumer in its own "process"
			tr2 = e.transport(e.options())
		}
		stops = append(stops, receive(t, tr2, q, 4, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			seen[env.ID]++
			perConsumer[i]++
			mu.Unlock()
			total.Add(1)
			time.Sleep(time.Millisecond) // let the other consumer take a share
			return nil
		}))
	}
	sendN(t, tr, q, n)
	drivertest.Eventually(t, 30*time.Second, func() bool { return total.Load() >= n }, "all messages")
	for _, stop := range stops {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n || total.Load() != n {
		t.Fatalf("got %d distinct of %d calls, want %d once each", len(seen), total.Load(), n)
	}
	if perConsumer[0] == 0 || perConsumer[1] == 0 {
		t.Errorf("one consumer got nothing: %v", perConsumer)
	}
	if r := e.ready(q); r != 0 {
		t.Errorf("%d messages left", r)
	}
}

func sendN(t testing.TB, tr *rabbitmq.Transport, q string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		env := newEnvelope("T", []byte(fmt.Sprint(i)))
		ids[i] = env.ID
		wg.Go(func() {
			if err := tr.Send(ctxT(t, 30*time.Second), q, env); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

func TestHandlerErrorRedelivers(t *testing.T) {
	t.Parallel()
	_, tr, q := provisionedQueue(t, "retry")
	var calls atomic.Int64
	done := make(chan *bus.Envelope, 1)
	receive(t, tr, q, 1, func(_ context.Context, env *bus.Envelope) error {
		if calls.Add(1) < 3 {
			return errors.New("transient")
		}
		done <- env
		return nil
	})
	want := fullEnvelope()
	if err := tr.Send(ctxT(t, 10*time.Second), q, want); err != nil {
		t.Fatal(err)
	}
	assertSameEnvelope(t, next(t, done), want)
	if c := calls.Load(); c != 3 {
		t.Errorf("handler called %d times, want 3", c)
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	_, tr, q := provisionedQueue(t, "bounded")
	const conc, n = 3, 60
	var cur, peak, total atomic.Int64
	receive(t, tr, q, conc, func(context.Context, *bus.Envelope) error {
		c := cur.Add(1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		cur.Add(-1)
		total.Add(1)
		return nil
	})
	sendN(t, tr, q, n)
	drivertest.Eventually(t, 30*time.Second, func() bool { return total.Load() == n }, "all handled")
	if p := peak.Load(); p > conc || p < 2 {
		t.Errorf("peak concurrency %d, want 2..%d", p, conc)
	}
}

func TestStopWithMessagesInFlightLosesNone(t *testing.T) {
	t.Parallel()
	e, tr, q := provisionedQueue(t, "stop")
	const n, conc = 40, 4
	ids := sendN(t, tr, q, n)

	var mu sync.Mutex
	ok := map[string]int{}
	gate := make(chan struct{})
	var started atomic.Int64
	stop := receive(t, tr, q, conc, func(_ context.Context, env *bus.Envelope) error {
		started.Add(1)
		<-gate
		mu.Lock()
		ok[env.ID]++
		mu.Unlock()
		return nil
	})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(gate) }) }) // runs before receive's stop
	drivertest.Eventually(t, 10*time.Second, func() bool { return started.Load() == conc }, "handlers in flight")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Receive returned with handlers still running")
	case <-time.After(100 * time.Millisecond):
	}
	release.Do(func() { close(gate) })
	<-stopped
	mu.Lock()
	first := len(ok)
	mu.Unlock()
	if first != conc {
		t.Errorf("%d handled before stop, want %d", first, conc)
	}
	if r := e.ready(q); r != n-first {
		t.Errorf("%d messages back in the queue, want %d", r, n-first)
	}

	receive(t, tr, q, conc, func(_ context.Context, env *bus.Envelope) error {
		mu.Lock()
		ok[env.ID]++
		mu.Unlock()
		return nil
	})
	drivertest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(ok) == n }, "the rest")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if ok[id] != 1 {
			t.Errorf("message %s handled %d times, want 1", id, ok[id])
		}
	}
}

func TestForeignMessageReachesHandlerWithDecodeError(t *testing.T) {
	t.Parallel()
	e, tr, q := provisionedQueue(t, "foreign")
	got, _ := collect(t, tr, q)
	err := e.admin(func(ch *amqp.Channel) error {
		return ch.Publish("", q, false, false, amqp.Publishing{
			MessageId: "from-elsewhere", Type: "legacy.Thing", Body: []byte("raw bytes"),
			Headers: amqp.Table{"x-app": "legacy", "n": int32(7)},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	env := next(t, got)
	if !bytes.Equal(env.Body, []byte("raw bytes")) || env.ID != "from-elsewhere" || env.Type != "legacy.Thing" {
		t.Errorf("got %+v", env)
	}
	if reason := env.Header(bus.HeaderDecodeError); !strings.Contains(reason, "postbus-version") {
		t.Errorf("decode error header = %q", reason)
	}
	if env.Header("x-app") != "legacy" || env.Header("n") != "7" {
		t.Errorf("foreign headers not kept as text: %v", env.Headers)
	}
}

func TestProvisionIsIdempotentAndUsesQuorumQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	top := bus.Topology{Queue: e.queue("ep"), Queues: []string{e.queue("error"), e.queue("dlq")}, Events: []string{orderPlaced}}
	e.provision(tr, top)
	e.provision(tr, top)
	for _, q := range append([]string{top.Queue}, top.Queues...) {
		if n := e.ready(q); n != 0 {
			t.Errorf("%s: %d messages", q, n)
		}
	}
	// A classic declaration of the same queue conflicts: it is a quorum queue.
	opts := e.options()
	opts.QueueType = rabbitmq.QueueTypeClassic
	err := e.transport(opts).Provision(ctxT(t, 10*time.Second), bus.Topology{Queue: top.Queue})
	if err == nil || !strings.Contains(err.Error(), "QueueType") {
		t.Fatalf("classic over quorum: got %v, want a precondition error naming QueueType", err)
	}
}

func TestBadNamesAreRejectedBeforeSending(t *testing.T) {
	t.Parallel()
	tr, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:1/", rabbitmq.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	ctx := ctxT(t, time.Second)
	long := strings.Repeat("x", 256)
	for name, err := range map[string]error{
		"empty queue":     tr.Send(ctx, "", newEnvelope("T", nil)),
		"long queue":      tr.Send(ctx, long, newEnvelope("T", nil)),
		"amq. queue":      tr.Provision(ctx, bus.Topology{Queue: "amq.mine"}),
		"wildcard event":  tr.Provision(ctx, bus.Topology{Queue: "q", Events: []string{"a.*.b"}}),
		"hash event":      tr.Publish(ctx, newEnvelope("a.#", nil)),
		"long event":      tr.Publish(ctx, newEnvelope(long, nil)),
		"events no queue": tr.Provision(ctx, bus.Topology{Events: []string{"a.b"}}),
	} {
		if !errors.Is(err, rabbitmq.ErrInvalidName) {
			t.Errorf("%s: got %v, want ErrInvalidName", name, err)
		}
	}
	env := newEnvelope("T", nil)
	env.ID = long
	if err := tr.Send(ctx, "q", env); !errors.Is(err, bus.ErrInvalidMessage) {
		t.Errorf("long ID: got %v, want bus.ErrInvalidMessage", err)
	}
	env = newEnvelope("T", nil)
	env.Headers = map[string]string{long: "v"}
	if err := tr.Send(ctx, "q", env); !errors.Is(err, bus.ErrInvalidMessage) {
		t.Errorf("long header key: got %v, want bus.ErrInvalidMessage", err)
	}
	if _, err := rabbitmq.New("http://x", rabbitmq.Options{}); !errors.Is(err, rabbitmq.ErrInvalidOptions) {
		t.Errorf("bad URL: got %v", err)
	}
	_, err = rabbitmq.New(brokerURL(), rabbitmq.Options{QueueType: "stream"})
	drivertest.TypedError[*rabbitmq.OptionsError](t, err, rabbitmq.ErrInvalidOptions, `rabbitmq: invalid options: QueueType: must be "quorum" or "classic"`)
}

func TestSendWithoutBrokerFailsWhenContextEnds(t *testing.T) {
	t.Parallel()
	var reported atomic.Int64
	tr, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:1/", rabbitmq.Options{
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		OnError: func(error) { reported.Add(1) }, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = tr.Send(ctx, "q", newEnvelope("T", nil))
	if !errors.Is(err, rabbitmq.ErrNotConnected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotConnected and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error does not say why: %v", err)
	}
	if errors.Is(err, rabbitmq.ErrPermanent) {
		t.Errorf("a refused TCP connection heals when the broker comes up, yet the error matches ErrPermanent: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("returned after %s, before the context ended", d)
	}
	if reported.Load() == 0 {
		t.Error("OnError was not called for the failed connection attempts")
	}
	// Receive on a context that ends during the outage returns nil.
	if err := tr.Receive(ctxT(t, 100*time.Millisecond), "q", bus.ReceiveOptions{}, func(context.Context, *bus.Envelope) error { return nil }); err != nil {
		t.Errorf("receive: %v", err)
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Send(context.Background(), "q", newEnvelope("T", nil)); !errors.Is(err, rabbitmq.ErrClosed) {
		t.Errorf("after close: got %v, want ErrClosed", err)
	}
}

func TestCloseEndsReceiveAndLaterCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr, err := rabbitmq.New(brokerURL(), e.options())
	if err != nil {
		t.Fatal(err)
	}
	q := e.queue("closing")
	e.provision(tr, bus.Topology{Queue: q})
	received := make(chan error, 1)
	go func() {
		received <- tr.Receive(context.Background(), q, bus.ReceiveOptions{Concurrency: 2}, func(context.Context, *bus.Envelope) error { return nil })
	}()
	if err := tr.Send(ctxT(t, 10*time.Second), q, newEnvelope("T", nil)); err != nil {
		t.Fatal(err)
	}
	drivertest.Eventually(t, 10*time.Second, func() bool { return e.ready(q) == 0 }, "the message consumed")
	if err := tr.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-received:
		if !errors.Is(err, rabbitmq.ErrClosed) {
			t.Errorf("Receive after Close: got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Receive still running after Close")
	}
	if err := tr.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Send":      tr.Send(context.Background(), q, newEnvelope("T", nil)),
		"Publish":   tr.Publish(context.Background(), newEnvelope("T", nil)),
		"Provision": tr.Provision(context.Background(), bus.Topology{Queue: q}),
		"Receive":   tr.Receive(context.Background(), q, bus.ReceiveOptions{}, func(context.Context, *bus.Envelope) error { return nil }),
	} {
		if !errors.Is(err, rabbitmq.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
}

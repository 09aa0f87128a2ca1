package sqs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqs"
)

// testOptions keep the emulator's round trips short: a long poll of 1s (so
// a stopping Receive is never far from a poll boundary) and a visibility
// timeout of 4s (so a message caught by a cancelled poll returns soon).
func testOptions() sqs.Options {
	return sqs.Options{VisibilityTimeout: 4 * time.Second, WaitTime: time.Second}
}

// features are what the transport guarantees: a failed message is made
// visible again at once (native redelivery); the body limit leaves 1 KiB of
// the 256 KiB for the envelope's attributes; no FIFO queues, so no order by
// key; SNS drops an event no queue subscribes to.
var features = bustest.Features{
	NativeRedelivery: true,
	MaxMessageSize:   sqs.MaxMessageBytes - 1024,
}

func TestConformance(t *testing.T) {
	t.Parallel()
	emulatorURL(t)
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		return newTransport(t, testOptions())
	}, features)
}

// receiveAll runs Receive in the background with h until the test ends.
func receiveAll(t *testing.T, tr *sqs.Transport, queue string, conc int, h bus.DeliveryHandler) {
	t.Helper()
	drivertest.ReceiveUntilEnd(t, tr, queue, conc, h)
}

func envelope(id string) *bus.Envelope {
	return &bus.Envelope{ID: id, Type: "test.Message", Kind: bus.KindCommand, Body: []byte(`{"n":1}`),
		ContentType: "application/json", SentAt: time.Now().UTC()}
}

// A handler that runs three times the visibility timeout keeps its message:
// the heartbeat extends the visibility, so no other consumer receives it
// meanwhile, and it is deleted once the handler succeeds.
func TestLongHandlerIsNotRedelivered(t *testing.T) {
	t.Parallel()
	const vis = 2 * time.Second
	tr := newTransport(t, sqs.Options{VisibilityTimeout: vis, WaitTime: time.Second})
	ctx := drivertest.Ctx(t, 0)
	const queue = "slow"
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := tr.Send(ctx, queue, envelope("slow-1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	var deliveries atomic.Int32
	handled := make(chan error, 4)
	h := func(ctx context.Context, env *bus.Envelope) error {
		deliveries.Add(1)
		select {
		case <-time.After(3 * vis):
			handled <- nil
			return nil
		case <-ctx.Done():
			handled <- context.Cause(ctx)
			return ctx.Err()
		}
	}
	// Two competing receivers: the one that does not hold the message
	// would get it if its visibility lapsed.
	receiveAll(t, tr, queue, 2, h)
	receiveAll(t, tr, queue, 2, h)
	select {
	case err := <-handled:
		if err != nil {
			t.Fatalf("the delivery's context ended while the handler ran: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not finish")
	}
	time.Sleep(vis + 2*time.Second) // a lapsed visibility would show now
	if n := deliveries.Load(); n != 1 {
		t.Fatalf("message delivered %d times, want once", n)
	}
}

// When the visibility cannot be extended (here: the queue was deleted), the
// delivery's context is cancelled with ErrVisibilityLost.
func TestLostVisibilityCancelsDelivery(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, sqs.Options{VisibilityTimeout: 3 * time.Second, HeartbeatInterval: 500 * time.Millisecond, WaitTime: time.Second})
	sc, _ := newClients(t)
	ctx := drivertest.Ctx(t, 0)
	const queue = "lost"
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := tr.Send(ctx, queue, envelope("lost-1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	var once sync.Once
	receiveAll(t, tr, queue, 1, func(ctx context.Context, env *bus.Envelope) error {
		once.Do(func() { close(started) })
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-time.After(20 * time.Second):
			cause <- nil
		}
		return ctx.Err()
	})
	<-started
	out, err := sc.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queueNameOf(t, sc, "lost"))})
	if err != nil {
		t.Fatalf("GetQueueUrl: %v", err)
	}
	if _, err := sc.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if err := <-cause; !errors.Is(err, sqs.ErrVisibilityLost) {
		t.Fatalf("delivery context cause %v, want ErrVisibilityLost", err)
	}
}

// queueNameOf finds the SQS name of the test queue whose name ends in suffix.
func queueNameOf(t *testing.T, sc *awssqs.Client, suffix string) string {
	t.Helper()
	out, err := sc.ListQueues(drivertest.Ctx(t, 0), &awssqs.ListQueuesInput{})
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	for _, u := range out.QueueUrls {
		name := u[strings.LastIndexByte(u, '/')+1:]
		if strings.HasSuffix(name, "-"+suffix) {
			return name
		}
	}
	t.Fatalf("no queue ending in %q", suffix)
	return ""
}

// A failed message is made visible again at once, not after the
// visibility timeout.
func TestFailureResetsVisibility(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, sqs.Options{VisibilityTimeout: 60 * time.Second, WaitTime: time.Second})
	ctx := drivertest.Ctx(t, 0)
	if err := tr.Send(ctx, "reset", envelope("reset-1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	var n atomic.Int32
	second := make(chan time.Duration, 1)
	var first time.Time
	receiveAll(t, tr, "reset", 1, func(ctx context.Context, env *bus.Envelope) error {
		if n.Add(1) == 1 {
			first = time.Now()
			return errors.New("fail once")
		}
		second <- time.Since(first)
		return nil
	})
	select {
	case d := <-second:
		t.Logf("redelivered after %v", d)
	case <-time.After(20 * time.Second):
		t.Fatal("failed message not redelivered within 20s (the visibility timeout is 60s)")
	}
}

// Bodies over the SQS limit are refused before anything is sent.
func TestTooLargeIsRefused(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, testOptions())
	env := envelope("big-1")
	env.Body = []byte(strings.Repeat("x", sqs.MaxMessageBytes))
	err := tr.Send(drivertest.Ctx(t, 0), "big", env)
	var tooLarge *sqs.MessageTooLargeError
	if !errors.As(err, &tooLarge) || !errors.Is(err, sqs.ErrMessageTooLarge) {
		t.Fatalf("Send of %d bytes: %v, want *MessageTooLargeError", len(env.Body), err)
	}
	if tooLarge.Size <= sqs.MaxMessageBytes || tooLarge.Limit != sqs.MaxMessageBytes {
		t.Errorf("error reports size %d limit %d", tooLarge.Size, tooLarge.Limit)
	}
	env.Type = "test.Event"
	if err := tr.Publish(drivertest.Ctx(t, 0), env); !errors.Is(err, sqs.ErrMessageTooLarge) {
		t.Fatalf("Publish: %v, want ErrMessageTooLarge", err)
	}
}

// Every envelope field survives, including binary and empty bodies, odd
// header bytes and more fields than SQS has attributes.
func TestEveryFieldRoundTrips(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, testOptions())
	ctx := drivertest.Ctx(t, 0)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	envs := []*bus.Envelope{
		{ID: "rt-full", Type: "shop.Order Placed/v1", Kind: bus.KindEvent, Body: []byte("héllo\r\n"), ContentType: "text/plain",
			Headers: map[string]string{"k": "v", "pct": "100%", "ctl": "a\x00b", "bad": "\xff"}, CorrelationID: "c-1",
			Attributes: map[string]string{"a": "1"}, StickyAttributes: map[string]string{"s": "2"}, Source: "src",
			Destination: "rt", SentAt: at, DueAt: at.Add(time.Hour), ExpiresAt: at.Add(2 * time.Hour), OrderingKey: "key"},
		{ID: "rt-binary", Type: "t", Kind: bus.KindCommand, Body: []byte{0, 1, 2, 0xff, 0xfe}},
		{ID: "rt-empty", Type: "t", Kind: bus.KindReply},
	}
	got := make(chan *bus.Envelope, len(envs))
	receiveAll(t, tr, "rt", 4, func(_ context.Context, env *bus.Envelope) error { got <- env; return nil })
	for _, env := range envs {
		if err := tr.Send(ctx, "rt", env); err != nil {
			t.Fatalf("Send %s: %v", env.ID, err)
		}
	}
	byID := map[string]*bus.Envelope{}
	for range envs {
		select {
		case e := <-got:
			byID[e.ID] = e
		case <-time.After(30 * time.Second):
			t.Fatalf("received %d of %d", len(byID), len(envs))
		}
	}
	for _, want := range envs {
		if diff := compareEnvelopes(want, byID[want.ID]); diff != "" {
			t.Errorf("%s: %s", want.ID, diff)
		}
	}
}

// Events reach each subscribing queue once, through SNS raw delivery.
func TestPublishReachesEachSubscriber(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, testOptions())
	ctx := drivertest.Ctx(t, 0)
	const typ = "github.com/acme/sales.OrderPlaced"
	var mu sync.Mutex
	got := map[string]int{}
	for _, q := range []string{"sub-a", "sub-b"} {
		if err := tr.Provision(ctx, bus.Topology{Queue: q, Events: []string{typ}}); err != nil {
			t.Fatalf("Provision %s: %v", q, err)
		}
		if err := tr.Provision(ctx, bus.Topology{Queue: q, Events: []string{typ}}); err != nil {
			t.Fatalf("second Provision %s: %v", q, err)
		}
		receiveAll(t, tr, q, 2, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			got[q+"/"+env.ID]++
			mu.Unlock()
			return nil
		})
	}
	env := envelope("ev-1")
	env.Type, env.Kind = typ, bus.KindEvent
	if err := tr.Publish(ctx, env); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if got["sub-a/ev-1"] != 1 || got["sub-b/ev-1"] != 1 || len(got) != 2 {
		t.Fatalf("deliveries %v, want ev-1 once in each queue", got)
	}
}

// Provision sets a queue policy that lets the bus's topics deliver. goaws
// v0.4.5 accepts SetQueueAttributes with a Policy but neither stores nor
// returns nor enforces it, so against it the test can only log that gap;
// against real SQS it checks the policy.
func TestProvisionSetsQueuePolicy(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, testOptions())
	sc, _ := newClients(t)
	ctx := drivertest.Ctx(t, 0)
	if err := tr.Provision(ctx, bus.Topology{Queue: "policy", Events: []string{"p.Event"}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	out, err := sc.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queueNameOf(t, sc, "policy"))})
	if err != nil {
		t.Fatalf("GetQueueUrl: %v", err)
	}
	attrs, err := sc.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNamePolicy}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	policy, ok := attrs.Attributes["Policy"]
	if !ok {
		t.Log("emulator gap: the queue policy is not returned (goaws v0.4.5 ignores Policy); real SQS returns it")
		return
	}
	if !strings.Contains(policy, "sns.amazonaws.com") || !strings.Contains(policy, "sqs:SendMessage") {
		t.Errorf("policy %s does not let SNS send", policy)
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	sc, nc := newClients(t)
	tr, err := sqs.New(sc, nc, sqs.Options{NamePrefix: "prod-"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Identity(), "sqs:"+emulatorURL(t)+"/prod-"; got != want {
		t.Errorf("Identity %q, want %q", got, want)
	}
	// Without an endpoint: the region. User info and query never appear.
	for endpoint, want := range map[string]string{
		"":                                   "sqs:eu-west-1/prod-",
		"https://user:secret@host:4566/?x=y": "sqs:https://host:4566/prod-",
	} {
		cfg := aws.Config{Region: "eu-west-1"}
		if endpoint != "" {
			cfg.BaseEndpoint = aws.String(endpoint)
		}
		tr, err := sqs.New(awssqs.NewFromConfig(cfg), nc, sqs.Options{NamePrefix: "prod-"})
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Identity(); got != want {
			t.Errorf("endpoint %q: Identity %q, want %q", endpoint, got, want)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	sc, nc := newClients(t)
	for _, o := range []sqs.Options{
		{NamePrefix: "a.b"},
		{NamePrefix: strings.Repeat("p", sqs.MaxNamePrefix+1)},
		{VisibilityTimeout: 1500 * time.Millisecond},
		{VisibilityTimeout: 13 * time.Hour},
		{VisibilityTimeout: 3 * time.Second, HeartbeatInterval: 3 * time.Second},
		{WaitTime: 21 * time.Second},
	} {
		_, err := sqs.New(sc, nc, o)
		var oe *sqs.OptionsError
		if !errors.As(err, &oe) || !errors.Is(err, sqs.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want *OptionsError", o, err)
		}
	}
	_, err := sqs.New(nil, nc, sqs.Options{})
	drivertest.TypedError[*sqs.OptionsError](t, err, sqs.ErrInvalidOptions, "sqs: invalid options: sqsClient: must not be nil")
}

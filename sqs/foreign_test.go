package sqs_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestForeignMessagesGoToErrorQueueWithReason: messages another program
// sent with the plain SDK, one without the Postbus attributes and one with
// a malformed one, reach the error queue once each, with their bodies and
// the reason they could not be read; the input queue is left empty and no
// handler ran.
func TestForeignMessagesGoToErrorQueueWithReason(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.NamePrefix = bustest.Namespace() + "-"
	tr := newTransport(t, opts)
	sc, _ := newClients(t)
	handled := make(chan struct{}, 2)
	b := bustest.StartBus(t, bus.Config{Endpoint: "in", ErrorQueue: "inerr", Transport: tr, Logger: drivertest.Logger()},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, bustest.Ping) error { handled <- struct{}{}; return nil })
		})
	ctx := drivertest.Ctx(t, 0)
	u, err := sc.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(opts.NamePrefix + "in")})
	if err != nil {
		t.Fatal(err)
	}
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	for _, m := range []*awssqs.SendMessageInput{
		{MessageBody: aws.String("from another tool"), MessageAttributes: map[string]types.MessageAttributeValue{"X-App": str("legacy")}},
		{MessageBody: aws.String("half postbus"), MessageAttributes: map[string]types.MessageAttributeValue{
			"Postbus-Id": str("bad-1"), "Postbus-Type": str("x.Y"), "Postbus-Sent-At": str("yesterday")}},
	} {
		m.QueueUrl = u.QueueUrl
		if _, err := sc.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		got = map[string]*bus.Envelope{}
		n   int
	)
	receiveAll(t, tr, "inerr", 1, func(_ context.Context, env *bus.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		got[string(env.Body)] = env
		n++
		return nil
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		done := n >= 2
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // a second copy would arrive about now
	mu.Lock()
	defer mu.Unlock()
	if n != 2 {
		t.Fatalf("the error queue got %d messages, want 2", n)
	}
	for body, want := range map[string]string{"from another tool": "Postbus-Type", "half postbus": "Postbus-Sent-At"} {
		env, ok := got[body]
		if !ok {
			t.Errorf("%q did not reach the error queue", body)
			continue
		}
		reason := env.Header(bus.HeaderFailureReason)
		if !strings.HasPrefix(reason, "sqs: ") || !strings.Contains(reason, want) || env.Header(bus.HeaderFailureKind) != "poison" {
			t.Errorf("%q: failure reason %q kind %q; want one naming %s", body, reason, env.Header(bus.HeaderFailureKind), want)
		}
	}
	if env := got["from another tool"]; env != nil && env.Header("X-App") != "legacy" {
		t.Errorf("the attributes of a foreign message were lost: headers %v", env.Headers)
	}
	attrs, err := sc.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		if v := attrs.Attributes[string(a)]; v != "0" {
			t.Errorf("input queue %s = %q, want 0", a, v)
		}
	}
	select {
	case <-handled:
		t.Error("a handler ran for a foreign message")
	default:
	}
	if m := b.Metrics(); m.MovedToError != 2 {
		t.Errorf("moved to error %d, want 2", m.MovedToError)
	}
}

package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestForeignMessagesGoToErrorQueueWithReason: messages another program
// published with the plain client, one without the Postbus headers and one
// with a malformed one, reach the error queue once each, with their bodies
// and the reason they could not be read; the input queue's consumer has
// nothing left and no handler ran.
func TestForeignMessagesGoToErrorQueueWithReason(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	handled := make(chan struct{}, 2)
	b := bustest.StartBus(t, bus.Config{Endpoint: "in", ErrorQueue: "in-error", Transport: tr, Logger: drivertest.Logger()},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, bustest.Ping) error { handled <- struct{}{}; return nil })
		})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	plain := &natsio.Msg{Subject: opts.SubjectPrefix + ".q.in", Data: []byte("from another tool"),
		Header: natsio.Header{"X-App": {"legacy"}}}
	bad := &natsio.Msg{Subject: opts.SubjectPrefix + ".q.in", Data: []byte("\x00half postbus"),
		Header: natsio.Header{"Postbus-Id": {"bad-1"}, "Postbus-Type": {"x.Y"}, "Postbus-Sent-At": {"yesterday"}}}
	for _, m := range []*natsio.Msg{plain, bad} {
		if _, err := js.PublishMsg(drivertest.Ctx(t, 0), m); err != nil {
			t.Fatal(err)
		}
	}
	errs := startReceive(t, tr, "in-error", 1, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return errs.distinct() == 2 }, "two messages in the error queue")
	errs.mu.Lock()
	bodies := map[string]string{}
	for _, env := range errs.envs {
		bodies[string(env.Body)] = env.Header(bus.HeaderFailureReason)
		if env.Header(bus.HeaderFailureKind) != "poison" {
			t.Errorf("%q: failure kind %q, want poison", env.Body, env.Header(bus.HeaderFailureKind))
		}
	}
	errs.mu.Unlock()
	for body, want := range map[string]string{"from another tool": "Postbus-Type", "\x00half postbus": "Postbus-Sent-At"} {
		if reason, ok := bodies[body]; !ok || !strings.HasPrefix(reason, "nats: ") || !strings.Contains(reason, want) {
			t.Errorf("body %q: in the error queue %v, reason %q; want a reason naming %s", body, ok, reason, want)
		}
	}
	if errs.count("bad-1") != 1 {
		t.Errorf("bad-1 reached the error queue %d times, want once", errs.count("bad-1"))
	}
	drivertest.Eventually(t, 15*time.Second, func() bool {
		info := consumerInfo(t, nc, opts, "in")
		return info.NumPending == 0 && info.NumAckPending == 0
	}, "the input consumer to settle both")
	select {
	case <-handled:
		t.Error("a handler ran for a foreign message")
	default:
	}
	if m := b.Metrics(); m.MovedToError != 2 {
		t.Errorf("moved to error %d, want 2", m.MovedToError)
	}
}

package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestForeignMessageGoesToErrorQueueWithReason: a message another program
// published with the plain client, without the Postbus headers, reaches
// the error queue once, with its body and headers and the reason it could
// not be read; the input queue is left empty and no handler ran.
func TestForeignMessageGoesToErrorQueueWithReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	in, errQ := e.queue("in"), e.queue("error")
	handled := make(chan struct{}, 1)
	b := bustest.StartBus(t, bus.Config{Endpoint: in, ErrorQueue: errQ, Transport: tr, Logger: testLogger(t)},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, bustest.Ping) error { handled <- struct{}{}; return nil })
		})
	err := e.admin(func(ch *amqp.Channel) error {
		return ch.Publish("", in, false, false, amqp.Publishing{
			MessageId: "from-elsewhere", Type: "legacy.Thing", Body: []byte("raw \x00 bytes"),
			Headers: amqp.Table{"x-app": "legacy", "postbus-version": int32(2)},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	got, stop := collect(t, tr, errQ)
	defer stop()
	env := next(t, got)
	if env.ID != "from-elsewhere" || string(env.Body) != "raw \x00 bytes" || env.Header("x-app") != "legacy" {
		t.Errorf("error queue got ID %q body %q headers %v", env.ID, env.Body, env.Headers)
	}
	if reason := env.Header(bus.HeaderFailureReason); !strings.HasPrefix(reason, "rabbitmq: ") || !strings.Contains(reason, "postbus-version") {
		t.Errorf("failure reason %q, want the mapping's reason", reason)
	}
	if kind := env.Header(bus.HeaderFailureKind); kind != "poison" {
		t.Errorf("failure kind %q, want poison", kind)
	}
	drivertest.Eventually(t, 15*time.Second, func() bool { return e.ready(in) == 0 }, "the input queue to empty")
	select {
	case env := <-got:
		t.Errorf("error queue got a second copy: %s", env.ID)
	case <-handled:
		t.Error("a handler ran for the foreign message")
	case <-time.After(500 * time.Millisecond):
	}
	if m := b.Metrics(); m.MovedToError != 1 {
		t.Errorf("moved to error %d, want 1", m.MovedToError)
	}
}

// TestForeignTimestampOutOfRangeGoesToErrorQueue: AMQP timestamps are any
// 64-bit number of seconds. A message whose timestamp or sent-at header
// lies outside the years 1 to 9999 still reaches the error queue, instead
// of failing to be copied there and coming back for ever.
func TestForeignTimestampOutOfRangeGoesToErrorQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	in, errQ := e.queue("in"), e.queue("error")
	b := bustest.StartBus(t, bus.Config{Endpoint: in, ErrorQueue: errQ, Transport: tr, Logger: testLogger(t)},
		func(b *bus.Bus) { _ = bus.Handle(b, func(context.Context, bustest.Ping) error { return nil }) })
	year10000 := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Add(time.Hour)
	err := e.admin(func(ch *amqp.Channel) error {
		for _, p := range []amqp.Publishing{
			{MessageId: "far-future", Type: "legacy.Thing", Timestamp: year10000, Body: []byte("one")},
			{MessageId: "year-zero", Type: "legacy.Thing", Body: []byte("two"), Headers: amqp.Table{
				"postbus-version": "1", "postbus-kind": "command", "postbus-sent-at": "0000-06-01T00:00:00Z"}},
		} {
			if err := ch.Publish("", in, false, false, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, stop := collect(t, tr, errQ)
	defer stop()
	seen := map[string]string{}
	for range 2 {
		env := next(t, got)
		seen[env.ID] = env.Header(bus.HeaderFailureReason)
	}
	for _, id := range []string{"far-future", "year-zero"} {
		if reason, ok := seen[id]; !ok || reason == "" {
			t.Errorf("%s: in the error queue %v, reason %q", id, ok, reason)
		}
	}
	drivertest.Eventually(t, 15*time.Second, func() bool { return e.ready(in) == 0 }, "the input queue to empty")
	if m := b.Metrics(); m.MovedToError != 2 {
		t.Errorf("moved to error %d, want 2", m.MovedToError)
	}
}

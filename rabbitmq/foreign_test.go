package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
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
	eventually(t, 15*time.Second, "the input queue to empty", func() bool { return e.ready(in) == 0 })
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

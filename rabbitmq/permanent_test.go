package rabbitmq_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/rabbitmq"
)

// TestUnroutableIsPermanent: a send to a queue that does not exist fails
// with an error that is both ErrUnroutable and bus.ErrPermanent.
func TestUnroutableIsPermanent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	err := tr.Send(ctxT(t, 10*time.Second), e.prefix+"does-not-exist", newEnvelope("T", nil))
	if !errors.Is(err, rabbitmq.ErrUnroutable) || !errors.Is(err, bus.ErrPermanent) {
		t.Fatalf("got %v, want ErrUnroutable and bus.ErrPermanent", err)
	}
}

// TestDelayedSendToMissingQueueGoesToErrorQueue: a delayed send to a queue
// that does not exist is accepted (the queue may exist by the due time),
// and at the due time the broker's NO_ROUTE makes the dispatcher move it to
// the error queue with the reason, instead of retrying it for ever.
func TestDelayedSendToMissingQueueGoesToErrorQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	errQ, missing := e.queue("error"), e.prefix+"missing"
	b := bustest.StartBus(t, bus.Config{Endpoint: e.queue("shop"), ErrorQueue: errQ, DeadLetterQueue: e.queue("dl"),
		Transport: tr, Logger: testLogger(t), Dispatcher: bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}}, nil)
	if err := b.Send(ctxT(t, 10*time.Second), bustest.Ping{N: 1}, bus.To(missing), bus.WithMessageID("nowhere-1"), bus.DeliverAfter(100*time.Millisecond)); err != nil {
		t.Fatalf("delayed send: %v", err)
	}
	got, stop := collect(t, tr, errQ)
	defer stop()
	env := next(t, got)
	if env.ID != "nowhere-1" || env.Header(bus.HeaderFailureKind) != "dispatch" ||
		!strings.Contains(env.Header(bus.HeaderFailureReason), "unroutable") {
		t.Fatalf("error queue got %s with headers %v, want nowhere-1 failed in dispatch as unroutable", env.ID, env.Headers)
	}
	deadline := time.Now().Add(10 * time.Second) // counted just after the error queue accepted it
	for b.Metrics().MovedToError == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := b.Metrics(); m.MovedToError != 1 || m.Dispatched != 0 {
		t.Errorf("metrics: moved to error %d, dispatched %d; want 1, 0", m.MovedToError, m.Dispatched)
	}
}

package nats_test

import (
	"errors"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// TestTooLargeAndNoStreamArePermanent: a message over the server's
// max_payload, and a message to a subject no stream takes (its stream was
// deleted), fail with errors matching bus.ErrPermanent; a transient
// failure (ctx ended while disconnected) does not.
func TestTooLargeAndNoStreamArePermanent(t *testing.T) {
	t.Parallel()
	tr, nc, opts := newTransport(t)
	queue := "perm"
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	big := command(queue, 1)
	big.Body = make([]byte, nc.MaxPayload()+1)
	if err := tr.Send(drivertest.Ctx(t, 0), queue, big); !errors.Is(err, bus.ErrPermanent) {
		t.Errorf("send of %d bytes: got %v, want bus.ErrPermanent", len(big.Body), err)
	}
	if err := tr.Send(drivertest.Ctx(t, 0), queue, command(queue, 2)); err != nil {
		t.Fatalf("send of a small message: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(drivertest.Ctx(t, 0), opts.Stream); err != nil {
		t.Fatal(err)
	}
	err = tr.Send(drivertest.Ctx(t, 0), queue, command(queue, 3))
	if !errors.Is(err, bus.ErrPermanent) || !errors.Is(err, nats.ErrNoAck) {
		t.Errorf("send with the stream deleted: got %v, want bus.ErrPermanent and ErrNoAck", err)
	}
}

// TestStartWithServerDownReturns: with nothing listening at the server's
// address (a connection that keeps retrying, with the default reconnect
// buffer), Start with context.Background() returns once StartTimeout has
// passed. (Without a reconnect buffer, Provision fails at once instead.)
func TestStartWithServerDownReturns(t *testing.T) {
	t.Parallel()
	nc, err := natsio.Connect("nats://"+bustest.DeadAddr(t), natsio.RetryOnFailedConnect(true),
		natsio.MaxReconnects(-1), natsio.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tr := mustNew(t, nc, uniqueOptions())
	err = bustest.StartWithBrokerDown(t, tr, 2*time.Second)
	if !errors.Is(err, bus.ErrStartTimeout) {
		t.Errorf("Start = %v, want bus.ErrStartTimeout", err)
	}
}

package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestTooLargeIsPermanent: a record over the producer's maximum batch
// size fails with kerr.MessageTooLarge, which also matches
// bus.ErrPermanent; a small one still goes through.
func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	tr, _ := newTransport(t)
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: "big"}); err != nil {
		t.Fatal(err)
	}
	env := &bus.Envelope{ID: "big-1", Type: "test.Cmd", Kind: bus.KindCommand, Body: make([]byte, 2<<20), Destination: "big"}
	err := tr.Send(drivertest.Ctx(t, 0), "big", env)
	if !errors.Is(err, kerr.MessageTooLarge) || !errors.Is(err, bus.ErrPermanent) {
		t.Errorf("send of 2 MiB: got %v, want kerr.MessageTooLarge and bus.ErrPermanent", err)
	}
	env.ID, env.Body = "small-1", []byte("{}")
	if err := tr.Send(drivertest.Ctx(t, 0), "big", env); err != nil {
		t.Errorf("send of a small message: %v", err)
	}
}

// TestStartWithBrokersDownReturns: with nothing listening at the seed
// address, Start with context.Background() returns: the client gives up
// dialing at once (connection refused), and StartTimeout bounds it when
// it would keep trying.
func TestStartWithBrokersDownReturns(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, seeds)
	opts.ClientOptions = append(opts.ClientOptions, kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	tr := mustNew(t, []string{bustest.DeadAddr(t)}, opts)
	err := bustest.StartWithBrokerDown(t, tr, 2*time.Second)
	if !errors.Is(err, bus.ErrStartTimeout) && !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want bus.ErrStartTimeout or the refused connection", err)
	}
}

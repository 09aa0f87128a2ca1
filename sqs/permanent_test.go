package sqs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// TestTooLargeIsPermanent: a message over the SQS limit is refused with an
// error that also matches bus.ErrPermanent, so a scheduled one is not
// retried for ever.
func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	err := (&sqs.MessageTooLargeError{ID: "big-1", Size: sqs.MaxMessageBytes + 1, Limit: sqs.MaxMessageBytes})
	if !errors.Is(err, bus.ErrPermanent) || !errors.Is(err, sqs.ErrMessageTooLarge) {
		t.Errorf("*MessageTooLargeError does not match bus.ErrPermanent and ErrMessageTooLarge")
	}
	tr := newTransport(t, testOptions())
	env := envelope("big-1")
	env.Body = []byte(strings.Repeat("x", sqs.MaxMessageBytes))
	if err := tr.Send(drivertest.Ctx(t, 0), "big", env); !errors.Is(err, bus.ErrPermanent) {
		t.Errorf("Send of %d bytes: %v, want bus.ErrPermanent", len(env.Body), err)
	}
}

// TestStartWithEndpointDownReturns: with nothing listening at the SQS
// endpoint, Start with context.Background() returns: the SDK gives up
// after its retries, and StartTimeout bounds it when it would keep trying.
func TestStartWithEndpointDownReturns(t *testing.T) {
	t.Parallel()
	sc, nc := (&sqstest.Emulator{URL: "http://" + bustest.DeadAddr(t)}).Clients(httpClient)
	tr, err := sqs.New(sc, nc, sqs.Options{NamePrefix: bustest.Namespace() + "-", Logger: drivertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	err = bustest.StartWithBrokerDown(t, tr, 5*time.Second)
	if !errors.Is(err, bus.ErrStartTimeout) && !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want bus.ErrStartTimeout or the refused connection", err)
	}
}

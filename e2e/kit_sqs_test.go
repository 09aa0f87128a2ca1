package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// sqsKit starts a goaws emulator of its own for the test and returns a
// namespace on it; the emulator and everything in it go at cleanup.
func sqsKit(t testing.TB) *kit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	emu, err := sqstest.Start(ctx)
	if err != nil {
		bustest.SkipOutsideCI(t, "goaws SQS/SNS emulator could not be started: %v", err)
	}
	t.Cleanup(emu.Stop)
	s := suffix()
	k := &kit{
		name: "sqs", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter",
	}
	k.newTransport = func(t testing.TB, _ string) bus.Transport {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
		t.Cleanup(hc.CloseIdleConnections)
		sc, nc := emu.Clients(hc)
		tr, err := sqs.New(sc, nc, sqs.Options{VisibilityTimeout: 10 * time.Second, WaitTime: time.Second, Logger: quietLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	return k
}

// TestDelayedTwoInstancesSQS is TestDelayedTwoInstances over SQS: two
// instances on one PostgreSQL store schedule 2,000 messages due over 5 s;
// each is handled once, none early.
func TestDelayedTwoInstancesSQS(t *testing.T) {
	t.Parallel()
	delayedTwoInstances(t, sqsKit(t))
}

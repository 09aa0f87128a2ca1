package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// What goaws v0.4.5 does differently from SQS and SNS, as far as the
// transport is concerned. The transport follows the real services; these
// tests record where the emulator departs, logging the gap instead of
// failing, so a newer emulator that closes one shows it in the log.
//
//   - Protocol: goaws answers only the SQS query protocol; the SDK's SQS
//     client speaks JSON. The tests give the client the query protocol
//     (main_test.go).
//   - Queue policy: SetQueueAttributes accepts Policy but goaws ignores it,
//     and SNS delivers to any queue (TestProvisionSetsQueuePolicy).
//   - ReceiveMessage ignores its VisibilityTimeout parameter; the queue's
//     attribute, which Provision sets, applies.
//   - Raw delivery: goaws reads a published body that is a JSON object of
//     strings with a "default" key as a per-protocol message structure,
//     which SNS does only with MessageStructure=json (below).
//   - Visibility is checked once a second, so a lapsed message returns up
//     to a second late.
func TestEmulatorGapRawDeliveryOfJSONWithDefaultKey(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, testOptions())
	ctx := drivertest.Ctx(t, 0)
	const typ = "gap.Event"
	if err := tr.Provision(ctx, bus.Topology{Queue: "gap", Events: []string{typ}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	got := make(chan *bus.Envelope, 1)
	receiveAll(t, tr, "gap", 1, func(_ context.Context, env *bus.Envelope) error { got <- env; return nil })
	env := envelope("gap-1")
	env.Type, env.Kind = typ, bus.KindEvent
	env.Body = []byte(`{"default":"a","sqs":"b"}`)
	if err := tr.Publish(ctx, env); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	select {
	case e := <-got:
		if string(e.Body) != string(env.Body) {
			t.Logf("emulator gap: SNS raw delivery turned body %s into %q (real SNS delivers it unchanged)", env.Body, e.Body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("event not delivered")
	}
}

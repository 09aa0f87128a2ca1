package rabbitmq_test

import (
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
)

// A copy in the error or dead-letter queue has a zero ExpiresAt and keeps
// its original timers only in headers: the broker must keep it until
// someone acts, so it gets no AMQP expiration. A message whose ExpiresAt is
// set does get one, so the test proves the mapping both ways.
func TestDeadLetterCopyHasNoBrokerExpiry(t *testing.T) {
	t.Parallel()
	e, tr, q := provisionedQueue(t, "deadletter")
	expired := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)

	deadLetter := newEnvelope("T", []byte("dead letter"))
	deadLetter.Headers = map[string]string{
		bus.HeaderTimeToBeReceived:   "1m0s",
		bus.HeaderReachQueueBy:       expired,
		bus.HeaderDeadLetterOnExpiry: "true",
		bus.HeaderDeadLetterTimer:    "time-to-be-received",
		bus.HeaderDeadLetterTime:     expired,
		"postbus.timer.expires-at":   expired,
	}
	timed := newEnvelope("T", []byte("timed"))
	timed.ExpiresAt = time.Now().Add(time.Minute)
	for _, env := range []*bus.Envelope{deadLetter, timed} {
		if err := tr.Send(ctxT(t, 10*time.Second), q, env); err != nil {
			t.Fatal(err)
		}
	}

	got := map[string]amqp.Delivery{}
	if err := e.admin(func(ch *amqp.Channel) error {
		for range 2 {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				return err
			}
			got[d.MessageId] = d
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d messages from %s, want 2", len(got), q)
	}
	if exp := got[deadLetter.ID].Expiration; exp != "" {
		t.Errorf("dead-letter copy (zero ExpiresAt, timers in headers) has broker expiration %q ms: the broker would delete it", exp)
	}
	if h := got[deadLetter.ID].Headers; h["postbus-expires-at"] != nil {
		t.Errorf("dead-letter copy carries %s = %v", "postbus-expires-at", h["postbus-expires-at"])
	}
	ms, err := strconv.Atoi(got[timed.ID].Expiration)
	if err != nil || ms < 60_000 || ms > 120_000 {
		t.Errorf("message expiring in a minute has broker expiration %q, want its remaining time plus the 1 min margin (60000-120000 ms)", got[timed.ID].Expiration)
	}
}

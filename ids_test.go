package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// WithMessageID accepted any bytes: an ID that is not valid UTF-8, holds a
// control character or is over MaxMessageIDLength is now an *OptionError
// from Send, Publish and SendBatch, and nothing is sent or stored.
func TestWithMessageIDRefusesIDsStoresCannotKey(t *testing.T) {
	t.Parallel()
	tr, store := bus.NewMemoryTransport(), bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "ids", Transport: tr, Persistence: store, Logger: quiet()},
		func(b *bus.Bus) {
			bus.Route[PlaceOrder](b, "ids")
			_ = bus.Handle(b, func(context.Context, PlaceOrder) error { return nil })
			_ = bus.Handle(b, func(context.Context, OrderPlaced) error { return nil })
		})
	bad := map[string]string{
		"not UTF-8":    "msg-\xff",
		"NUL":          "a\x00b",
		"newline":      "a\nb",
		"DEL":          "a\x7fb",
		"C1 control":   "a\u0085b",
		"empty":        "",
		"over the max": strings.Repeat("x", bus.MaxMessageIDLength+1),
	}
	ctx := ctxT(t)
	for name, id := range bad {
		check := func(call string, err error) {
			t.Helper()
			var oe *bus.OptionError
			if !errors.As(err, &oe) || oe.Option != "WithMessageID" || !errors.Is(err, bus.ErrInvalidOption) {
				t.Errorf("%s: %s with ID %q: err = %v, want an *OptionError for WithMessageID", name, call, id, err)
			}
		}
		check("Send", b.Send(ctx, PlaceOrder{ID: name}, bus.WithMessageID(id)))
		check("Publish", b.Publish(ctx, OrderPlaced{ID: name}, bus.WithMessageID(id)))
		var batch bus.Batch
		batch.Send(PlaceOrder{ID: name}, bus.WithMessageID(id))
		check("SendBatch", b.SendBatch(ctx, &batch))
	}
	if n := store.Len(); n != 0 {
		t.Errorf("store holds %d rows after refused sends, want 0", n)
	}
	if sent := b.Metrics().Sent; sent != 0 {
		t.Errorf("Metrics().Sent = %d after refused sends, want 0", sent)
	}
	for _, id := range []string{"order-42/ünïcode", strings.Repeat("x", bus.MaxMessageIDLength)} {
		if err := b.Send(ctx, PlaceOrder{ID: "ok"}, bus.WithMessageID(id)); err != nil {
			t.Errorf("Send with ID %q: %v, want it accepted", id, err)
		}
	}
}

// A foreign message whose ID no text column holds reached the failed store
// as is: PostgreSQL cleaned "msg-\xff" and "msg-\xfe" into one stored
// message. FailedFromEnvelope now gives each an ID of its own, derived from
// its bytes, that every store can key.
func TestFailedFromEnvelopeKeepsUnstorableIDsApart(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, id := range []string{"msg-\xff", "msg-\xfe", "a\x00b", "ab"} {
		m := bus.FailedFromEnvelope(&bus.Envelope{ID: id, Type: "t"}, time.Now())
		if !utf8.ValidString(m.ID) || strings.IndexByte(m.ID, 0) >= 0 {
			t.Errorf("FailedFromEnvelope(ID %q).ID = %q, want valid UTF-8 without NUL", id, m.ID)
		}
		if prev, ok := seen[m.ID]; ok {
			t.Errorf("IDs %q and %q both became %q", prev, id, m.ID)
		}
		seen[m.ID] = id
	}
	if m := bus.FailedFromEnvelope(&bus.Envelope{ID: "ab", Type: "t"}, time.Now()); m.ID != "ab" {
		t.Errorf("a storable ID became %q, want it kept", m.ID)
	}
}

package rabbitmq

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
)

// deliver turns a publishing into the delivery a consumer would get,
// without a broker (the integration tests cover the wire).
func deliver(p amqp.Publishing) *amqp.Delivery {
	return &amqp.Delivery{
		Headers: p.Headers, ContentType: p.ContentType, DeliveryMode: p.DeliveryMode,
		CorrelationId: p.CorrelationId, MessageId: p.MessageId, Timestamp: p.Timestamp.Truncate(time.Second),
		Type: p.Type, Body: p.Body,
	}
}

func sameEnvelope(a, b *bus.Envelope) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Kind == b.Kind && string(a.Body) == string(b.Body) &&
		a.ContentType == b.ContentType && a.CorrelationID == b.CorrelationID &&
		a.Source == b.Source && a.Destination == b.Destination &&
		maps.Equal(a.Headers, b.Headers) && maps.Equal(a.Attributes, b.Attributes) &&
		maps.Equal(a.StickyAttributes, b.StickyAttributes) &&
		a.SentAt.Equal(b.SentAt) && a.DueAt.Equal(b.DueAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func TestMappingPropertiesAndHeaders(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	env := &bus.Envelope{
		ID: "id", Type: "a/b.C", Kind: bus.KindEvent, Body: []byte("b"), ContentType: "ct",
		CorrelationID: "corr", Source: "src", SentAt: sent,
		Headers: map[string]string{"h": "1"}, StickyAttributes: map[string]string{"s": "2"},
	}
	p, err := toPublishing(env)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageId != "id" || p.Type != "a/b.C" || p.CorrelationId != "corr" || p.ContentType != "ct" ||
		!p.Timestamp.Equal(sent) || p.DeliveryMode != amqp.Persistent {
		t.Errorf("properties: %+v", p)
	}
	want := amqp.Table{
		HeaderVersion: "1", HeaderKind: "event", HeaderSource: "src",
		HeaderSentAt: "2026-01-02T02:04:05.000000006Z",
	}
	for k, v := range want {
		if p.Headers[k] != v {
			t.Errorf("header %s = %v, want %v", k, p.Headers[k], v)
		}
	}
	for _, absent := range []string{HeaderDestination, HeaderDueAt, HeaderExpiresAt, HeaderAttributes} {
		if _, ok := p.Headers[absent]; ok {
			t.Errorf("header %s set for an empty field", absent)
		}
	}
	if err := p.Headers.Validate(); err != nil {
		t.Errorf("headers the client cannot encode: %v", err)
	}
	got := fromDelivery(deliver(p))
	if !sameEnvelope(got, env) || got.SentAt.Location() != time.UTC {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, env)
	}
}

func TestMappingRejectsWhatAMQPCannotCarry(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 256)
	for name, env := range map[string]*bus.Envelope{
		"ID":            {ID: long},
		"Type":          {Type: long},
		"ContentType":   {ContentType: long},
		"CorrelationID": {CorrelationID: long},
		"Headers":       {Headers: map[string]string{long: ""}},
		"Attributes":    {Attributes: map[string]string{long: ""}},
		"DueAt":         {DueAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := toPublishing(env)
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != name {
			t.Errorf("%s: got %v, want a *FieldError for it", name, err)
		}
	}
	if _, err := toPublishing(&bus.Envelope{ID: strings.Repeat("k", 255)}); err != nil {
		t.Errorf("255 bytes is allowed: %v", err)
	}
}

func TestMappingForeignAndMalformed(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]amqp.Table{
		"no version":     {"x": "y"},
		"future version": {HeaderVersion: "2", HeaderKind: "command"},
		"bad kind":       {HeaderVersion: "1", HeaderKind: "sideways"},
		"kind not text":  {HeaderVersion: "1", HeaderKind: int32(1)},
		"bad time":       {HeaderVersion: "1", HeaderKind: "command", HeaderSentAt: "yesterday"},
		"bad table":      {HeaderVersion: "1", HeaderKind: "command", HeaderHeaders: "not a table"},
		"bad table item": {HeaderVersion: "1", HeaderKind: "command", HeaderAttributes: amqp.Table{"n": int64(1)}},
	} {
		d := &amqp.Delivery{MessageId: "m", Type: "T", Body: []byte("raw"), Headers: h, Timestamp: time.Unix(100, 0)}
		env := fromDelivery(d)
		if env.Header(bus.HeaderDecodeError) == "" {
			t.Errorf("%s: no decode error: %+v", name, env)
		}
		if string(env.Body) != "raw" || env.ID != "m" || env.Type != "T" || !env.SentAt.Equal(time.Unix(100, 0)) {
			t.Errorf("%s: lost what was readable: %+v", name, env)
		}
		if env.Kind != 0 || env.Attributes != nil {
			t.Errorf("%s: half-decoded fields kept: %+v", name, env)
		}
	}
}

// FuzzMappingRoundTrip checks that any envelope the mapping accepts comes
// back unchanged, and that decoding never panics.
func FuzzMappingRoundTrip(f *testing.F) {
	f.Add("id", "a.b/C", uint8(1), []byte("body"), "ct", "k", "v", int64(1700000000123456789), "src")
	f.Add("", "", uint8(0), []byte(nil), "", "", "", int64(0), "")
	f.Add("\x00", "x", uint8(255), []byte{0xff}, "\xff", "\xff", "\x00", int64(-1), "ü")
	f.Fuzz(func(t *testing.T, id, typ string, kind uint8, body []byte, ct, k, v string, nanos int64, src string) {
		env := &bus.Envelope{
			ID: id, Type: typ, Kind: bus.Kind(kind), Body: body, ContentType: ct, Source: src,
			Headers: map[string]string{k: v}, Attributes: map[string]string{v: k},
		}
		if nanos != 0 {
			env.DueAt = time.Unix(0, nanos)
		}
		p, err := toPublishing(env)
		if err != nil {
			return
		}
		if err := p.Headers.Validate(); err != nil {
			t.Fatalf("client cannot encode headers: %v", err)
		}
		got := fromDelivery(deliver(p))
		if !sameEnvelope(got, env) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, env)
		}
		// Any header values decode without panicking.
		_ = fromDelivery(&amqp.Delivery{Headers: amqp.Table{
			HeaderVersion: "1", HeaderKind: k, HeaderSentAt: v, HeaderDueAt: typ,
			HeaderHeaders: amqp.Table{k: body}, HeaderSource: body,
		}})
	})
}

func TestExpirationSafetyNet(t *testing.T) {
	tr := &Transport{opts: Options{}.withDefaults()}
	msg := amqp.Publishing{}
	tr.setExpiration(&msg, &bus.Envelope{})
	if msg.Expiration != "" {
		t.Errorf("message without timers got expiration %q", msg.Expiration)
	}
	tr.setExpiration(&msg, &bus.Envelope{ExpiresAt: time.Now().Add(time.Minute)})
	ms, _ := strconv.Atoi(msg.Expiration)
	if ms < 119000 || ms > 120000 {
		t.Errorf("expiration = %q ms, want about two minutes (expiry + 1 min margin)", msg.Expiration)
	}
	tr.opts.ExpiryMargin = -1
	msg = amqp.Publishing{}
	tr.setExpiration(&msg, &bus.Envelope{ExpiresAt: time.Now().Add(time.Minute)})
	if msg.Expiration != "" {
		t.Errorf("negative margin must disable the broker expiration, got %q", msg.Expiration)
	}
}

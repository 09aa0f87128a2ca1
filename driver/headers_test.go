package driver_test

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// natsLike is the mapping of a broker with text headers that trims values.
var natsLike = driver.Mapping{Keys: driver.DefaultKeys(), Values: driver.Percent{EdgeBlanks: true}, MapKeys: driver.Token{}}

// pairs turns a map into the sequence Decode reads.
func pairs(h map[string]string) func(func(string, string) bool) {
	return func(yield func(string, string) bool) {
		for k, v := range h {
			if !yield(k, v) {
				return
			}
		}
	}
}

func encode(t *testing.T, m driver.Mapping, env *bus.Envelope) map[string]string {
	t.Helper()
	h := map[string]string{}
	if err := m.Encode(env, func(k, v string) { h[k] = v }); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return h
}

func fullEnvelope() *bus.Envelope {
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	return &bus.Envelope{
		ID: "id-1", Type: "acme.Ordered", Kind: bus.KindReply, ContentType: "application/json",
		CorrelationID: " c\t", Source: "orders", Destination: "billing",
		SentAt: at, DueAt: at.Add(time.Hour), ExpiresAt: at.Add(2 * time.Hour), OrderingKey: "k%1",
		Headers:          map[string]string{"a.b": "v\n", "": "empty key"},
		Attributes:       map[string]string{"tenant": ""},
		StickyAttributes: map[string]string{"ñ": "ñandú"},
	}
}

func TestMappingRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]driver.Mapping{
		"nats-like":  natsLike,
		"kafka-like": {Keys: driver.DefaultKeys().Lower(), KindNumber: true},
		"sqs-like":   {Keys: driver.DefaultKeys(), Values: driver.Percent{KeepControl: "\t\n\r", UTF8: true}, MapKeys: driver.Percent{UTF8: true}},
	} {
		want := fullEnvelope()
		got, err := m.Decode(pairs(encode(t, m, want)))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, %v; want %+v", name, got, err, want)
		}
	}
}

func TestMappingEncodesTheWireFormat(t *testing.T) {
	t.Parallel()
	h := encode(t, natsLike, fullEnvelope())
	for k, v := range map[string]string{
		"Postbus-Id": "id-1", "Postbus-Kind": "reply", "Postbus-Correlation-Id": "%20c%09",
		"Postbus-Sent-At": "2031-03-04T05:06:07.891011121Z", "Postbus-Ordering-Key": "k%251",
		"Postbus-H-a_2Eb": "v%0A", "Postbus-H-": "empty key", "Postbus-A-tenant": "", "Postbus-S-_C3_B1": "ñandú",
	} {
		if got, ok := h[k]; !ok || got != v {
			t.Errorf("%s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if len(h) != 15 {
		t.Errorf("got %d headers %v, want 15: empty fields are left out", len(h), h)
	}
	kafka := driver.Mapping{Keys: driver.DefaultKeys().Lower(), KindNumber: true}
	if h := encode(t, kafka, &bus.Envelope{ID: "i", Type: "t", Kind: bus.KindEvent}); !maps.Equal(h, map[string]string{
		"postbus-id": "i", "postbus-type": "t", "postbus-kind": "2",
	}) {
		t.Errorf("kafka-like: got %v", h)
	}
}

func TestMappingRefusesMalformedHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m        driver.Mapping
		key, val string
		want     string
	}{
		{natsLike, driver.KeyType, "", "header Postbus-Type: missing"},
		{natsLike, driver.KeyKind, "nope", "header Postbus-Kind: "},
		{natsLike, driver.KeySentAt, "yesterday", "header Postbus-Sent-At: "},
		{natsLike, driver.KeySource, "a%G1", "header Postbus-Source: malformed escape"},
		{natsLike, driver.KeySource, "a%2f", "header Postbus-Source: malformed escape"},
		{natsLike, driver.KeySource, "a%4", "header Postbus-Source: malformed escape: truncated"},
		{natsLike, "Postbus-H-a.b", "v", "header Postbus-H-a.b: key: malformed escape"},
		{driver.Mapping{Keys: driver.DefaultKeys(), KindNumber: true}, driver.KeyKind, "4", "header Postbus-Kind: bad kind"},
	} {
		h := map[string]string{driver.KeyID: "id-9", driver.KeyType: "t.T", c.key: c.val}
		env, err := c.m.Decode(pairs(h))
		var he *driver.HeaderError
		if !errors.As(err, &he) || !errors.Is(err, driver.ErrMalformedHeader) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s=%q: got %v, want a *HeaderError starting %q", c.key, c.val, err, c.want)
		}
		if env.ID != "id-9" {
			t.Errorf("%s=%q: ID %q lost", c.key, c.val, env.ID)
		}
	}
}

func TestMappingDecodeKeepsTheLastOfRepeatedKeys(t *testing.T) {
	t.Parallel()
	seq := func(yield func(string, string) bool) {
		for _, p := range [][2]string{{"postbus-type", "old"}, {"h:k", "1"}, {"postbus-type", "new"}, {"h:k", "2"}, {"other", "x"}} {
			if !yield(p[0], p[1]) {
				return
			}
		}
	}
	keys := driver.DefaultKeys().Lower()
	keys.Header = "h:"
	env, err := driver.Mapping{Keys: keys}.Decode(seq)
	if err != nil || env.Type != "new" || env.Headers["k"] != "2" || len(env.Headers) != 1 {
		t.Errorf("got %+v, %v; want Type new and header k=2", env, err)
	}
}

func TestMappingSizeLimits(t *testing.T) {
	t.Parallel()
	m := natsLike
	m.MaxValue = 4
	err := m.Encode(&bus.Envelope{ID: "12345", Type: "t"}, func(string, string) {})
	var se *driver.SizeError
	if !errors.As(err, &se) || se.Key != driver.KeyID || se.Size != 5 || se.Limit != 4 || !errors.Is(err, bus.ErrPermanent) {
		t.Errorf("got %v, want a permanent *SizeError on %s", err, driver.KeyID)
	}
	m.MaxValue, m.MaxKey = 0, 12
	err = m.Encode(&bus.Envelope{Type: "t", Headers: map[string]string{"long-key": "v"}}, func(string, string) {})
	if !errors.As(err, &se) || se.What != "key" {
		t.Errorf("got %v, want a *SizeError on the key", err)
	}
}

func TestPercentRules(t *testing.T) {
	t.Parallel()
	sqs := driver.Percent{KeepControl: "\t\n\r", UTF8: true, LowerHex: true}
	nats := driver.Percent{EdgeBlanks: true}
	for _, c := range []struct {
		p        driver.Percent
		in, want string
	}{
		{nats, "plain text", "plain text"},
		{nats, " a\tb ", "%20a%09b%20"},
		{nats, "100%", "100%25"},
		{nats, "\xff\x7f", "\xff%7F"},
		{sqs, " a\tb\r\n ", " a\tb\r\n "},
		{sqs, "\x00\xff\uFFFE é", "%00%FF%EF%BF%BE é"},
	} {
		got := c.p.Escape(c.in)
		if got != c.want {
			t.Errorf("%+v.Escape(%q) = %q, want %q", c.p, c.in, got, c.want)
		}
		if back, err := c.p.Unescape(got); err != nil || back != c.in {
			t.Errorf("%+v.Unescape(%q) = %q, %v; want %q", c.p, got, back, err, c.in)
		}
	}
	if got, err := sqs.Unescape("a%2fb"); err != nil || got != "a/b" {
		t.Errorf("LowerHex: got %q, %v", got, err)
	}
}

func TestUndecodable(t *testing.T) {
	t.Parallel()
	env := driver.Undecodable("nats", "id-1", []byte("raw"), nil, errors.New("header X: bad"))
	if env.ID != "id-1" || string(env.Body) != "raw" || env.Header(bus.HeaderDecodeError) != "nats: header X: bad" {
		t.Errorf("got %+v", env)
	}
}

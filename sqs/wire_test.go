package sqs

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 100)
	for _, c := range []struct {
		in, want string
		limit    int
	}{
		{"billing", "billing", 80},
		{"billing-error_2", "billing-error_2", 80},
		{"a.b", "a_b-", 80},
		{"", "-", 80},
		{long, strings.Repeat("a", 69) + "-", 80},
	} {
		got := sanitize(c.in, c.limit)
		if len(got) > c.limit || !validName(got) || !strings.HasPrefix(got, c.want) {
			t.Errorf("sanitize(%q) = %q, want a valid name of at most %d starting %q", c.in, got, c.limit, c.want)
		}
	}
	if sanitize("a.b", 80) == sanitize("a/b", 80) || sanitize("a.b", 80) == "a_b" {
		t.Error("sanitised names collide")
	}
	if sanitize(long+"x", 80) == sanitize(long+"y", 80) {
		t.Error("names differing past the cut collide")
	}
}

func TestEncodeKeepsToTenAttributes(t *testing.T) {
	t.Parallel()
	at := time.Now()
	env := &bus.Envelope{ID: "i", Type: "t", Kind: bus.KindEvent, Body: []byte{0}, ContentType: "c", CorrelationID: "c",
		Source: "s", Destination: "d", SentAt: at, DueAt: at, ExpiresAt: at, OrderingKey: "k",
		Headers: map[string]string{"h": "1"}, Attributes: map[string]string{"a": "1"}, StickyAttributes: map[string]string{"s": "1"}}
	w, err := encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.attrs) > 10 {
		t.Fatalf("%d attributes; SQS allows 10", len(w.attrs))
	}
	attrs := map[string]string{}
	for _, a := range w.attrs {
		attrs[a.name] = a.value
	}
	got := decode(w.body, attrs)
	if got.Header(bus.HeaderDecodeError) != "" || !bytes.Equal(got.Body, env.Body) || !maps.Equal(got.Headers, env.Headers) ||
		got.OrderingKey != "k" || !got.DueAt.Equal(at) {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestDecodeErrorsReachTheHandler(t *testing.T) {
	t.Parallel()
	for _, attrs := range []map[string]string{
		{},
		{attrType: "t", attrKind: "sideways"},
		{attrType: "t", attrSentAt: "yesterday"},
		{attrType: "t", attrBody: "rot13"},
		{attrType: "t", attrEnvelope: "{"},
		{attrType: "t", attrID: "%zz"},
	} {
		env := decode("body", attrs)
		if env.Header(bus.HeaderDecodeError) == "" || string(env.Body) != "body" {
			t.Errorf("decode(%v) = %+v, want the raw body and a decode error", attrs, env)
		}
	}
}

// FuzzWire checks that any envelope either is refused as too large or
// round-trips exactly, and that decoding arbitrary attributes never panics.
func FuzzWire(f *testing.F) {
	f.Add("id", "type", []byte(`{"a":1}`), "hk", "hv", "key")
	f.Add("", "t", []byte{0, 0xff}, "%", "\x00", "")
	f.Add("x%41", "é", []byte(""), "a\tb", " \r\n", "\uFFFE")
	f.Fuzz(func(t *testing.T, id, typ string, body []byte, hk, hv, key string) {
		if typ == "" {
			typ = "t"
		}
		env := &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: body, OrderingKey: key,
			Headers: map[string]string{hk: hv}}
		w, err := encode(env)
		if err != nil {
			return
		}
		attrs := map[string]string{}
		for _, a := range w.attrs {
			if !validBody([]byte(a.value)) {
				t.Fatalf("attribute %s value %q is not valid SQS text", a.name, a.value)
			}
			attrs[a.name] = a.value
		}
		if !validBody([]byte(w.body)) || w.body == "" {
			t.Fatalf("body %q is not valid SQS text", w.body)
		}
		got := decode(w.body, attrs)
		if got.ID != id || got.Type != typ || !bytes.Equal(got.Body, body) && len(body)+len(got.Body) > 0 ||
			got.OrderingKey != key || got.Headers[hk] != hv {
			t.Fatalf("round trip of %+v gave %+v", env, got)
		}
		_ = decode(hv, map[string]string{attrType: hk, attrEnvelope: hv, attrBody: key, attrID: id})
	})
}

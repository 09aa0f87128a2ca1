package sqs

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzDecode feeds decode any body and any String attributes
// (fuzzcheck.Pairs; a repeated name keeps the last value, as a map does).
// It returns in bounded time without panicking; a message it decodes is
// written back the same by encode; one it cannot read is marked with a
// reason and keeps its body, and its error-queue copy can be sent.
func FuzzDecode(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		w, err := encode(env)
		if err != nil {
			f.Fatal(err)
		}
		kv := make([]string, 0, 2*len(w.attrs))
		for _, a := range w.attrs {
			kv = append(kv, a.name, a.value)
		}
		f.Add(w.body, fuzzcheck.Join(kv...))
	}
	// Foreign and malformed messages.
	f.Add("from another tool", []byte(nil))
	f.Add(`{"Type":"Notification","Message":"x"}`, fuzzcheck.Join("Content-Type", "json"))
	f.Add("x", fuzzcheck.Join(attrType, "t", attrKind, "bogus"))
	f.Add("!!", fuzzcheck.Join(attrType, "t", attrBody, bodyBase64))
	f.Add("x", fuzzcheck.Join(attrType, "t", attrBody, "gzip"))
	f.Add("x", fuzzcheck.Join(attrType, "t", attrEnvelope, `{"due":"soon","h":{"%":"v"}}`))
	f.Add("x", fuzzcheck.Join(attrType, "t", attrEnvelope, `{"h":{"a":1}}`, attrID, "%G0"))
	f.Add("x", fuzzcheck.Join(attrType, "t", attrEnvelope, `[`, attrSentAt, "2031-02-30T00:00:00Z"))
	f.Fuzz(func(t *testing.T, body string, attrData []byte) {
		attrs := map[string]string{}
		for _, p := range fuzzcheck.Pairs(attrData) {
			attrs[p[0]] = p[1]
		}
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = decode(body, attrs) })
		if n := fuzzcheck.Size(env); n > len(body)+2*len(attrData)+64 { // an unreadable message keeps its ID twice: as ID and as the attribute it came in
			t.Fatalf("%d bytes of input decoded to %d", len(body)+len(attrData), n)
		}
		if fuzzcheck.Marked(t, env, "sqs: ") {
			if string(env.Body) != body {
				t.Fatalf("body %q became %q", body, env.Body)
			}
			if _, err := encode(fuzzcheck.Failed(env)); err != nil && len(body)+len(attrData) < MaxMessageBytes/2 {
				t.Fatalf("the error-queue copy of %+v cannot be sent: %v", env, err)
			}
			return
		}
		if env.Type == "" {
			t.Fatalf("decoded an envelope without a type: %+v", env)
		}
		w, err := encode(env)
		if err != nil {
			return // too large once written back: refused, not sent wrong
		}
		back := make(map[string]string, len(w.attrs))
		for _, a := range w.attrs {
			back[a.name] = a.value
		}
		if again := decode(w.body, back); !fuzzcheck.Same(again, env) {
			t.Fatalf("decoded %+v, written back and decoded again %+v", env, again)
		}
	})
}

package nats

import (
	"bytes"
	"strings"
	"testing"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzDecodeMsg feeds decodeMsg any set of headers (fuzzcheck.Pairs: key
// NUL value NUL …; a key may repeat) and any body. It returns in bounded
// time without panicking; it keeps the body; an envelope it decodes is
// written back the same by encodeMsg; a message it cannot read is marked
// with a reason, and the error-queue copy of it is a message NATS accepts.
func FuzzDecodeMsg(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		m := encodeMsg("p.q.x", env, "origin")
		f.Add(seedOf(m.Header), m.Data)
	}
	// Foreign and malformed messages: no headers, a tool's own headers,
	// bad escapes, times, kinds and map keys.
	f.Add([]byte(nil), []byte("from another tool"))
	f.Add(fuzzcheck.Join("Content-Type", "text/plain", "Nats-Msg-Id", "x"), []byte("hi"))
	f.Add(fuzzcheck.Join(driver.KeyID, "%4", driver.KeyType, "t"), []byte{})
	f.Add(fuzzcheck.Join(driver.KeyType, "t", driver.KeyKind, "bogus"), []byte{0xff})
	f.Add(fuzzcheck.Join(driver.KeyType, "t", driver.KeySentAt, "yesterday"), []byte("x"))
	f.Add(fuzzcheck.Join(driver.KeyType, "t", mapping.Keys.Header+"_Z", "v"), []byte("x"))
	f.Add(fuzzcheck.Join(driver.KeyType, "t", mapping.Keys.Attribute+"a", "%zz", driver.KeyType, "second"), []byte("x"))
	f.Add(fuzzcheck.Join(driver.KeyType, "t", driver.KeyKind, "300", driver.KeyDueAt, "2031-03-04T05:06:07+25:00"), []byte("x"))
	f.Fuzz(func(t *testing.T, hdrs, body []byte) {
		h := natsio.Header{}
		for _, p := range fuzzcheck.Pairs(hdrs) {
			h[p[0]] = append(h[p[0]], p[1])
		}
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = decodeMsg(h, body) })
		if !bytes.Equal(env.Body, body) {
			t.Fatalf("body %q became %q", body, env.Body)
		}
		if n := fuzzcheck.Size(env); n > 2*len(hdrs)+len(body)+64 {
			t.Fatalf("%d bytes of input decoded to %d", len(hdrs)+len(body), n)
		}
		if fuzzcheck.Marked(t, env, "nats: ") {
			checkSendable(t, encodeMsg("p.q.error", fuzzcheck.Failed(env), ""))
			return
		}
		if env.Type == "" {
			t.Fatalf("decoded an envelope without a type: %+v", env)
		}
		m := encodeMsg("p.q.x", env, "")
		checkSendable(t, m)
		if again := decodeMsg(m.Header, m.Data); !fuzzcheck.Same(again, env) {
			t.Fatalf("decoded %+v, written back and decoded again %+v", env, again)
		}
	})
}

// seedOf writes h as fuzzcheck.Pairs input.
func seedOf(h natsio.Header) []byte {
	var kv []string
	for k, vs := range h {
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	return fuzzcheck.Join(kv...)
}

// checkSendable fails t when m has a header the NATS protocol cannot carry:
// a key that is not a token, a value with a line break.
func checkSendable(t *testing.T, m *natsio.Msg) {
	t.Helper()
	for k, vs := range m.Header {
		if k == "" || strings.ContainsAny(k, ": \t\r\n") {
			t.Fatalf("header key %q cannot be sent", k)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				t.Fatalf("header %s value %q cannot be sent", k, v)
			}
		}
	}
}

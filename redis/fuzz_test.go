package redis

import (
	"bytes"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzDecodeEntry feeds decode any stream entry: an entry ID, any fields
// (fuzzcheck.Pairs) and, when withEnvelope, an envelope field holding any
// bytes. It returns in bounded time without panicking; an entry it decodes
// is written back the same by bus.MarshalEnvelope; one it cannot read is
// marked with a reason and keeps the raw envelope bytes as its body or,
// without an envelope field, every field as a header, so the error queue
// shows what arrived.
func FuzzDecodeEntry(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		f.Add("1700000000000-0", []byte(nil), bus.MarshalEnvelope(env), true)
		f.Add("1700000000000-1", fuzzcheck.Join(fieldRequeues, "2"), bus.MarshalEnvelope(env), true)
	}
	// Foreign and malformed entries.
	f.Add("1-0", fuzzcheck.Join("data", `{"id":1}`, "source", "legacy"), []byte(nil), false)
	f.Add("1-1", []byte(nil), []byte("not an envelope"), true)
	f.Add("1-2", []byte(nil), []byte{'P', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, true)
	f.Add("1-3", fuzzcheck.Join(fieldRequeues, "x"), []byte{}, true)
	f.Fuzz(func(t *testing.T, id string, fields, envelope []byte, withEnvelope bool) {
		m := goredis.XMessage{ID: id, Values: map[string]any{}}
		for _, p := range fuzzcheck.Pairs(fields) {
			m.Values[p[0]] = p[1]
		}
		if withEnvelope {
			m.Values[fieldEnvelope] = string(envelope)
		}
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = decode(m) })
		if n := fuzzcheck.Size(env); n > len(id)+len(fields)+len(envelope)+128 {
			t.Fatalf("%d bytes of input decoded to %d", len(id)+len(fields)+len(envelope), n)
		}
		if fuzzcheck.Marked(t, env, "redis: ") {
			if env.ID != id {
				t.Fatalf("entry %q marked with ID %q", id, env.ID)
			}
			raw, ok := m.Values[fieldEnvelope].(string)
			if ok && !bytes.Equal(env.Body, []byte(raw)) {
				t.Fatalf("envelope field %q became body %q", raw, env.Body)
			}
			for k, v := range m.Values {
				if !ok && k != fieldRequeues && k != bus.HeaderDecodeError && env.Headers[k] != v {
					t.Fatalf("field %q = %q lost: headers %v", k, v, env.Headers)
				}
			}
			return
		}
		again, err := bus.UnmarshalEnvelope(bus.MarshalEnvelope(env))
		if err != nil || !fuzzcheck.Same(again, env) {
			t.Fatalf("decoded %+v, written back and decoded again %+v, %v", env, again, err)
		}
	})
}

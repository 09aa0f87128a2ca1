package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzDecodeRecordHeaders feeds decodeRecord any record: any headers
// (fuzzcheck.Pairs, in order, keys may repeat), key and value. It returns
// in bounded time without panicking; it keeps the value as the body and
// always gives an ID; a record it decodes is written back the same by
// encodeRecord; one it cannot read is marked with a reason.
func FuzzDecodeRecordHeaders(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		r := encodeRecord("t", env)
		f.Add(seedOf(r.Headers), r.Key, r.Value)
	}
	// Foreign and malformed records.
	f.Add([]byte(nil), []byte(nil), []byte("not an envelope"))
	f.Add(fuzzcheck.Join("traceparent", "00-ab-cd-01", "content-type", "text/plain"), []byte("k"), []byte("x"))
	f.Add(fuzzcheck.Join(hID, "i", hType, "t", hKind, "9"), []byte(nil), []byte("x"))
	f.Add(fuzzcheck.Join(hID, "i", hType, "t", hKind, "-1", hSentAt, "yesterday"), []byte(nil), []byte{0})
	f.Add(fuzzcheck.Join(hID, "", hType, "t", hKind, "1", hKind, "x"), []byte(nil), []byte{})
	f.Add(fuzzcheck.Join(hID, "i", hType, "t", hKind, "99999999999999999999", hDueAt, "2031-13-40T00:00:00Z"), []byte(nil), []byte{})
	f.Fuzz(func(t *testing.T, hdrs, key, value []byte) {
		r := &kgo.Record{Topic: "t", Partition: 3, Offset: 7, Key: key, Value: value}
		for _, p := range fuzzcheck.Pairs(hdrs) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: p[0], Value: []byte(p[1])})
		}
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = decodeRecord(r) })
		if !bytes.Equal(env.Body, value) || env.ID == "" {
			t.Fatalf("record with value %q decoded to ID %q body %q", value, env.ID, env.Body)
		}
		if n := fuzzcheck.Size(env); n > len(hdrs)+len(key)+len(value)+64 {
			t.Fatalf("%d bytes of input decoded to %d", len(hdrs)+len(key)+len(value), n)
		}
		if fuzzcheck.Marked(t, env, "kafka: ") {
			return
		}
		if env.Type == "" || env.Kind < bus.KindCommand || env.Kind > bus.KindReply {
			t.Fatalf("decoded an envelope without a type or kind: %+v", env)
		}
		if again := decodeRecord(encodeRecord("t", env)); !fuzzcheck.Same(again, env) {
			t.Fatalf("decoded %+v, written back and decoded again %+v", env, again)
		}
	})
}

// seedOf writes record headers as fuzzcheck.Pairs input.
func seedOf(hs []kgo.RecordHeader) []byte {
	kv := make([]string, 0, 2*len(hs))
	for _, h := range hs {
		kv = append(kv, h.Key, string(h.Value))
	}
	return fuzzcheck.Join(kv...)
}

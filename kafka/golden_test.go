package kafka

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// wireEnvelopes are drivertest.WireEnvelopes with kinds Kafka carries.
func wireEnvelopes() []*bus.Envelope {
	envs := drivertest.WireEnvelopes()
	envs[2].Kind = bus.KindEvent
	return envs
}

// TestWireGolden: the records of wireEnvelopes are those in
// testdata/wire.golden.json, written by an earlier release, and decode to
// the same envelopes: the wire format does not change.
func TestWireGolden(t *testing.T) {
	t.Parallel()
	type record struct {
		Topic   string
		Key     []byte
		Headers [][2]string // the fields in order, then the map entries sorted
	}
	var got []record
	for i, env := range wireEnvelopes() {
		r := encodeRecord("t"+strings.Repeat("x", i), env)
		var fixed, entries [][2]string
		for _, h := range r.Headers {
			if p := [2]string{h.Key, string(h.Value)}; strings.HasPrefix(h.Key, "postbus-") {
				fixed = append(fixed, p)
			} else {
				entries = append(entries, p)
			}
		}
		slices.SortFunc(entries, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		got = append(got, record{r.Topic, r.Key, append(fixed, entries...)})
	}
	want := drivertest.Golden(t, "testdata/wire.golden.json", got)
	for i, env := range wireEnvelopes() {
		r := &kgo.Record{Topic: want[i].Topic, Key: want[i].Key, Value: env.Body}
		for _, h := range want[i].Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
		}
		if dec := decodeRecord(r); !reflect.DeepEqual(dec, env) {
			t.Errorf("golden %d decodes to %+v, want %+v", i, dec, env)
		}
	}
}

// TestWireRefusesMalformed: records another tool wrote that the decoder
// cannot read reach the handler with the reason in bus.HeaderDecodeError.
func TestWireRefusesMalformed(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ key, val string }{
		"no type":       {hType, ""},
		"bad kind":      {hKind, "nope"},
		"kind zero":     {hKind, "0"},
		"kind too big":  {hKind, "4"},
		"bad sent time": {hSentAt, "yesterday"},
		"bad due time":  {hDueAt, "2031-13-01T00:00:00Z"},
	} {
		r := &kgo.Record{Value: []byte("raw"), Headers: []kgo.RecordHeader{
			{Key: hID, Value: []byte("id-9")}, {Key: hType, Value: []byte("t.T")}, {Key: hKind, Value: []byte("1")},
			{Key: c.key, Value: []byte(c.val)},
		}}
		env := decodeRecord(r)
		if env.Header(bus.HeaderDecodeError) == "" || string(env.Body) != "raw" || env.ID != "id-9" {
			t.Errorf("%s: got %+v, want the raw body, the ID and a decode error", name, env)
		}
	}
	env := decodeRecord(&kgo.Record{Topic: "t", Partition: 2, Offset: 9, Headers: []kgo.RecordHeader{{Key: hType, Value: []byte("t.T")}}})
	if env.Header(bus.HeaderDecodeError) == "" || env.ID != "kafka-t-2-9" {
		t.Errorf("no ID or kind: got %+v", env)
	}
}

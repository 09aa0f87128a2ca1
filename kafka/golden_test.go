package kafka

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
)

// goldenEnvelopes are encoded and compared with testdata/wire.golden.json,
// written by an earlier release: the wire format must not change, and what
// it wrote must still decode to the same envelope.
func goldenEnvelopes() []*bus.Envelope {
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	return []*bus.Envelope{
		{ID: "id-1", Type: "acme.Ordered", Kind: bus.KindCommand, Body: []byte(`{"n":1}`), ContentType: "application/json"},
		{
			ID: "id-2", Type: "a.B", Kind: bus.KindReply, Body: []byte("x\x00y"), ContentType: "text/plain",
			CorrelationID: " corr\t", Source: "orders", Destination: "billing", SentAt: at, DueAt: at.Add(time.Hour),
			ExpiresAt: at.Add(2 * time.Hour), OrderingKey: "key%1",
			Headers:          map[string]string{"Mixed.Case_key": "v\n", "": "empty key", "h:colon": "a:b"},
			Attributes:       map[string]string{"k": "", "tenant": "acme"},
			StickyAttributes: map[string]string{"trace": "t\x7f1", "sp ace": " lead"},
		},
		{ID: "id-3", Type: "e.Event", Kind: bus.KindEvent, Body: nil},
	}
}

type goldenCase struct {
	Topic   string      `json:"topic"`
	Key     *string     `json:"key"`
	Headers [][2]string `json:"headers"` // the fixed fields in order, then the map entries sorted
}

func TestWireGolden(t *testing.T) {
	t.Parallel()
	var got []goldenCase
	for i, env := range goldenEnvelopes() {
		r := encodeRecord("t"+strings.Repeat("x", i), env)
		c := goldenCase{Topic: r.Topic}
		if r.Key != nil {
			k := string(r.Key)
			c.Key = &k
		}
		var fixed, maps [][2]string
		for _, h := range r.Headers {
			p := [2]string{h.Key, string(h.Value)}
			if strings.HasPrefix(h.Key, "postbus-") {
				fixed = append(fixed, p)
			} else {
				maps = append(maps, p)
			}
		}
		sort.Slice(maps, func(i, j int) bool { return maps[i][0] < maps[j][0] })
		c.Headers = append(fixed, maps...)
		got = append(got, c)
	}
	const path = "testdata/wire.golden.json"
	if os.Getenv("POSTBUS_UPDATE_GOLDEN") == "1" {
		js, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []goldenCase
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("wire format changed:\n got %v\nwant %v", got, want)
	}
	for i, env := range goldenEnvelopes() {
		r := &kgo.Record{Topic: want[i].Topic, Value: env.Body}
		if want[i].Key != nil {
			r.Key = []byte(*want[i].Key)
		}
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

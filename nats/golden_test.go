package nats

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"

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
			Headers:          map[string]string{"Mixed.Case_key": "v\n", "": "empty key", "ñ": "ñandú"},
			Attributes:       map[string]string{"k": "", "tenant": "acme"},
			StickyAttributes: map[string]string{"trace": "t\x7f1", "sp ace": " lead"},
		},
		{ID: "id-3", Type: "e.Event", Kind: bus.Kind(9), Body: nil},
	}
}

type goldenCase struct {
	Subject string              `json:"subject"`
	Header  map[string][]string `json:"header"`
}

func TestWireGolden(t *testing.T) {
	t.Parallel()
	var got []goldenCase
	for i, env := range goldenEnvelopes() {
		m := encodeMsg("p.q.x"+strings.Repeat("y", i), env, "origin")
		got = append(got, goldenCase{Subject: m.Subject, Header: m.Header})
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
		dec := decodeMsg(natsio.Header(want[i].Header), env.Body)
		if !reflect.DeepEqual(dec, env) {
			t.Errorf("golden %d decodes to %+v, want %+v", i, dec, env)
		}
	}
}

// TestWireRefusesMalformed: messages another tool wrote that the decoder
// cannot read reach the handler with the reason in bus.HeaderDecodeError
// and, where readable, their ID.
func TestWireRefusesMalformed(t *testing.T) {
	t.Parallel()
	ok := natsio.Header{hdrID: {"id-9"}, hdrType: {"t.T"}}
	for name, c := range map[string]struct{ key, val string }{
		"no type":          {hdrType, ""},
		"bad kind":         {hdrKind, "nope"},
		"bad sent time":    {hdrSentAt, "yesterday"},
		"bad due time":     {hdrDueAt, "2031-13-01T00:00:00Z"},
		"bad value escape": {hdrSource, "a%G1"},
		"short escape":     {hdrSource, "a%4"},
		"lower-case hex":   {hdrSource, "a%2f"},
		"bad map key":      {hdrHeaderPrefix + "a.b", "v"},
		"bad key escape":   {hdrAttrPrefix + "_ZZ", "v"},
	} {
		h := natsio.Header{}
		for k, v := range ok {
			h[k] = v
		}
		h[c.key] = []string{c.val}
		env := decodeMsg(h, []byte("raw"))
		if env.Header(bus.HeaderDecodeError) == "" || string(env.Body) != "raw" || env.ID != "id-9" {
			t.Errorf("%s: got %+v, want the raw body, the ID and a decode error", name, env)
		}
	}
	keys := make([]string, 0, len(ok))
	for k := range ok {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if env := decodeMsg(ok, nil); env.Header(bus.HeaderDecodeError) != "" {
		t.Errorf("headers %v: unexpected decode error %s", keys, env.Header(bus.HeaderDecodeError))
	}
}

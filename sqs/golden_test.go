package sqs

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

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
			Headers:          map[string]string{"Mixed.Case_key": "v\n\x01", "": "empty key", "ñ": "ñandú\xff"},
			Attributes:       map[string]string{"k": "", "tenant": "acme"},
			StickyAttributes: map[string]string{"trace": "t\x7f1", "sp ace": " lead\uFFFE"},
		},
		{ID: "id-3", Type: "e.Event", Kind: bus.Kind(9), Body: nil},
	}
}

type goldenCase struct {
	Body  string      `json:"body"`
	Attrs []attribute `json:"attrs"`
}

func (a attribute) MarshalJSON() ([]byte, error) { return json.Marshal([2]string{a.name, a.value}) }

func (a *attribute) UnmarshalJSON(b []byte) error {
	var p [2]string
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	a.name, a.value = p[0], p[1]
	return nil
}

func TestWireGolden(t *testing.T) {
	t.Parallel()
	var got []goldenCase
	for _, env := range goldenEnvelopes() {
		w, err := encode(env)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, goldenCase{Body: w.body, Attrs: w.attrs})
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
		attrs := map[string]string{}
		for _, a := range want[i].Attrs {
			attrs[a.name] = a.value
		}
		dec := decode(want[i].Body, attrs)
		if len(env.Body) == 0 {
			env.Body = dec.Body
		}
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
	for name, c := range map[string]struct{ key, val string }{
		"no type":        {attrType, ""},
		"bad kind":       {attrKind, "nope"},
		"bad sent time":  {attrSentAt, "yesterday"},
		"bad escape":     {attrSource, "a%G1"},
		"short escape":   {attrSource, "a%4"},
		"bad body enc":   {attrBody, "rot13"},
		"bad base64":     {attrBody, bodyBase64},
		"bad json":       {attrEnvelope, "{"},
		"bad due":        {attrEnvelope, `{"due":"soon"}`},
		"bad map escape": {attrEnvelope, `{"h":{"k":"%"}}`},
	} {
		attrs := map[string]string{attrID: "id-9", attrType: "t.T", c.key: c.val}
		env := decode("raw!", attrs)
		if env.Header(bus.HeaderDecodeError) == "" || string(env.Body) != "raw!" || env.ID != "id-9" {
			t.Errorf("%s: got %+v, want the raw body, the ID and a decode error", name, env)
		}
	}
	env := decode("b", map[string]string{attrID: "i", attrType: "t", attrSource: "a%2fb"})
	if env.Header(bus.HeaderDecodeError) != "" || env.Source != "a/b" {
		t.Errorf("lower-case escape: got %+v, want Source a/b", env)
	}
}

package sqs

import (
	"reflect"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// TestWireGolden: the body and attributes of drivertest.WireEnvelopes are
// those in testdata/wire.golden.json, written by an earlier release, and
// decode to the same envelopes: the wire format does not change.
func TestWireGolden(t *testing.T) {
	t.Parallel()
	type msg struct {
		Body  string
		Attrs [][2]string
	}
	var got []msg
	for _, env := range drivertest.WireEnvelopes() {
		w, err := encode(env)
		if err != nil {
			t.Fatal(err)
		}
		m := msg{Body: w.body}
		for _, a := range w.attrs {
			m.Attrs = append(m.Attrs, [2]string{a.name, a.value})
		}
		got = append(got, m)
	}
	want := drivertest.Golden(t, "testdata/wire.golden.json", got)
	for i, env := range drivertest.WireEnvelopes() {
		attrs := map[string]string{}
		for _, a := range want[i].Attrs {
			attrs[a[0]] = a[1]
		}
		dec := decode(want[i].Body, attrs)
		if len(env.Body) == 0 {
			env.Body = dec.Body // an empty body decodes as nil or empty
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

package nats

import (
	"reflect"
	"strings"
	"testing"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/internal/drivertest"
)

// TestWireGolden: the headers of drivertest.WireEnvelopes are those in
// testdata/wire.golden.json, written by an earlier release, and decode to
// the same envelopes: the wire format does not change.
func TestWireGolden(t *testing.T) {
	t.Parallel()
	type msg struct {
		Subject string
		Header  natsio.Header
	}
	var got []msg
	for i, env := range drivertest.WireEnvelopes() {
		m := encodeMsg("p.q.x"+strings.Repeat("y", i), env, "origin")
		got = append(got, msg{m.Subject, m.Header})
	}
	want := drivertest.Golden(t, "testdata/wire.golden.json", got)
	for i, env := range drivertest.WireEnvelopes() {
		if dec := decodeMsg(want[i].Header, env.Body); !reflect.DeepEqual(dec, env) {
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
		"no type":          {driver.KeyType, ""},
		"bad kind":         {driver.KeyKind, "nope"},
		"bad sent time":    {driver.KeySentAt, "yesterday"},
		"bad due time":     {driver.KeyDueAt, "2031-13-01T00:00:00Z"},
		"bad value escape": {driver.KeySource, "a%G1"},
		"short escape":     {driver.KeySource, "a%4"},
		"lower-case hex":   {driver.KeySource, "a%2f"},
		"bad map key":      {mapping.Keys.Header + "a.b", "v"},
		"bad key escape":   {mapping.Keys.Attribute + "_ZZ", "v"},
	} {
		h := natsio.Header{driver.KeyID: {"id-9"}, driver.KeyType: {"t.T"}, c.key: {c.val}}
		env := decodeMsg(h, []byte("raw"))
		if env.Header(bus.HeaderDecodeError) == "" || string(env.Body) != "raw" || env.ID != "id-9" {
			t.Errorf("%s: got %+v, want the raw body, the ID and a decode error", name, env)
		}
	}
	if env := decodeMsg(natsio.Header{driver.KeyID: {"id-9"}, driver.KeyType: {"t.T"}}, nil); env.Header(bus.HeaderDecodeError) != "" {
		t.Errorf("unexpected decode error %s", env.Header(bus.HeaderDecodeError))
	}
}

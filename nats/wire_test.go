package nats

import (
	"maps"
	"testing"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
)

func FuzzEscapeToken(f *testing.F) {
	for _, s := range []string{"", "billing", "github.com/acme/sales.OrderPlaced", "a_b", "_G", "sp ace*>", "東京"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escapeToken(s)
		for i := 0; i < len(e); i++ {
			if !isPlain(e[i]) && e[i] != '_' {
				t.Fatalf("escapeToken(%q) = %q holds %q", s, e, e[i])
			}
		}
		if back, err := unescapeToken(e); err != nil || back != s {
			t.Fatalf("unescapeToken(%q) = %q, %v; want %q", e, back, err, s)
		}
	})
}

func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "plain", " lead", "trail\t", "100%", "a\r\nb", "\x00\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escapeValue(s)
		if back, err := unescapeValue(e); err != nil || back != s {
			t.Fatalf("unescapeValue(%q) = %q, %v; want %q", e, back, err, s)
		}
	})
}

// FuzzDecodeHeaders feeds arbitrary header values: decoding never panics,
// and either yields an envelope or flags bus.HeaderDecodeError.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add("t.T", "command", "2031-03-04T05:06:07Z", "Postbus-H-k", "v")
	f.Add("", "nope", "yesterday", "Postbus-A-_ZZ", "%G")
	f.Fuzz(func(t *testing.T, typ, kind, sent, key, val string) {
		h := natsio.Header{hdrType: {typ}, hdrKind: {kind}, hdrSentAt: {sent}, key: {val}}
		env := decodeMsg(h, []byte("body"))
		if string(env.Body) != "body" {
			t.Fatalf("body lost: %q", env.Body)
		}
	})
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	env := &bus.Envelope{
		ID: "id-1", Type: "a.B", Kind: bus.KindReply, Body: []byte("x"),
		Headers:    map[string]string{"Mixed.Case_key": "v\n", "": "empty key"},
		Attributes: map[string]string{"k": ""},
	}
	m := encodeMsg("p.q.x", env)
	got := decodeMsg(m.Header, m.Data)
	if got.ID != env.ID || got.Type != env.Type || got.Kind != env.Kind || string(got.Body) != "x" ||
		!maps.Equal(got.Headers, env.Headers) || !maps.Equal(got.Attributes, env.Attributes) {
		t.Errorf("round trip: got %+v, want %+v", got, env)
	}
	if m.Header.Get("Nats-Msg-Id") == encodeMsg("p.q.other", env).Header.Get("Nats-Msg-Id") {
		t.Error("Nats-Msg-Id is not scoped by destination")
	}
	changed := env.Clone()
	changed.Headers["retries"] = "1"
	if m.Header.Get("Nats-Msg-Id") == encodeMsg("p.q.x", changed).Header.Get("Nats-Msg-Id") {
		t.Error("a changed envelope has the same Nats-Msg-Id")
	}
	if m.Header.Get("Nats-Msg-Id") != encodeMsg("p.q.x", env.Clone()).Header.Get("Nats-Msg-Id") {
		t.Error("a re-send of the same envelope has another Nats-Msg-Id")
	}
}

func TestNames(t *testing.T) {
	if got := escapeToken("github.com/acme/sales.OrderPlaced"); got != "github_2Ecom_2Facme_2Fsales_2EOrderPlaced" {
		t.Errorf("escapeToken = %q", got)
	}
	long := string(make([]byte, 500))
	if n := consumerName(long); len(n) > maxConsumerName {
		t.Errorf("consumer name of %d bytes", len(n))
	}
	if n := eventConsumerName(long, long); len(n) > 255 {
		t.Errorf("event consumer name of %d bytes", len(n))
	}
}

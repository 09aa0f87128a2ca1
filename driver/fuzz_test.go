package driver_test

import (
	"reflect"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// FuzzDecode feeds arbitrary headers to every kind of mapping: Decode never
// panics, and what decodes without error encodes and decodes to the same
// envelope.
func FuzzDecode(f *testing.F) {
	f.Add("t.T", "command", "2031-03-04T05:06:07Z", "Postbus-H-k", "v")
	f.Add("", "nope", "yesterday", "Postbus-A-_ZZ", "%G")
	f.Add("a%2", "3", "", "postbus-s-x", "%41")
	mappings := []driver.Mapping{
		natsLike,
		{Keys: driver.DefaultKeys().Lower(), KindNumber: true},
		{Keys: driver.DefaultKeys(), Values: driver.Percent{KeepControl: "\t\n\r", UTF8: true, LowerHex: true}, MapKeys: driver.Percent{UTF8: true}},
	}
	f.Fuzz(func(t *testing.T, typ, kind, sent, key, val string) {
		for _, m := range mappings {
			h := map[string]string{m.Keys.Type: typ, m.Keys.Kind: kind, m.Keys.SentAt: sent, key: val}
			env, err := m.Decode(pairs(h))
			if env == nil {
				t.Fatal("nil envelope")
			}
			if err != nil {
				continue
			}
			again, err := m.Decode(pairs(encode(t, m, env)))
			if err != nil || !reflect.DeepEqual(again, env) {
				t.Fatalf("re-decoded %+v, %v; want %+v", again, err, env)
			}
		}
	})
}

// FuzzRoundTrip: every envelope field and map entry survives Encode and
// Decode on every mapping.
func FuzzRoundTrip(f *testing.F) {
	f.Add("id", "t.T", uint8(1), "corr", "hk", " v\x00\xff%")
	f.Add("", "x", uint8(9), "\t", "", "")
	mappings := []driver.Mapping{
		natsLike,
		{Keys: driver.DefaultKeys(), Values: driver.Percent{KeepControl: "\t\n\r", UTF8: true}, MapKeys: driver.Percent{UTF8: true}},
	}
	f.Fuzz(func(t *testing.T, id, typ string, kind uint8, corr, hk, hv string) {
		if typ == "" {
			return
		}
		want := &bus.Envelope{ID: id, Type: typ, Kind: bus.Kind(kind), CorrelationID: corr,
			Headers: map[string]string{hk: hv}, StickyAttributes: map[string]string{hv: hk}}
		for _, m := range mappings {
			got, err := m.Decode(pairs(encode(t, m, want)))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, want)
			}
		}
	})
}

func FuzzPercent(f *testing.F) {
	for _, s := range []string{"", "plain", " lead", "trail\t", "100%", "a\r\nb", "\x00\x7f", "\xff\uFFFF"} {
		f.Add(s)
	}
	escapers := []driver.Percent{{}, {EdgeBlanks: true}, {KeepControl: "\t\n\r", UTF8: true, LowerHex: true}}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range escapers {
			e := p.Escape(s)
			if back, err := p.Unescape(e); err != nil || back != s {
				t.Fatalf("%+v: Unescape(%q) = %q, %v; want %q", p, e, back, err, s)
			}
			_, _ = p.Unescape(s) // never panics
		}
	})
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "billing", "github.com/acme/sales.OrderPlaced", "a_b", "_G", "sp ace*>", "東京"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var tok driver.Token
		e := tok.Escape(s)
		for i := 0; i < len(e); i++ {
			if !driver.TokenByte(e[i]) && e[i] != '_' {
				t.Fatalf("Escape(%q) = %q holds %q", s, e, e[i])
			}
		}
		if back, err := tok.Unescape(e); err != nil || back != s {
			t.Fatalf("Unescape(%q) = %q, %v; want %q", e, back, err, s)
		}
		_, _ = tok.Unescape(s)
	})
}

package rabbitmq

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzFromDelivery feeds fromDelivery any delivery: any properties and any
// AMQP headers of any field type (see fuzzTable). It returns in bounded
// time without panicking and keeps the body; a delivery it maps is written
// back the same by toPublishing; one it cannot map is marked with a reason;
// and the error-queue copy of either is a message the client can publish.
func FuzzFromDelivery(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		p, err := toPublishing(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p.MessageId, p.Type, p.ContentType, p.CorrelationId, p.Timestamp.Unix(), tableSeed(p.Headers), p.Body)
	}
	// Foreign and malformed deliveries.
	f.Add("from-elsewhere", "legacy.Thing", "", "", int64(0), fuzzcheck.Join("x-app", "slegacy", "n", "i7"), []byte("raw bytes"))
	f.Add("", "", "", "", int64(-1), []byte(nil), []byte(nil))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "s2"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "b1", HeaderKind, "i1"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "s1", HeaderKind, "s256"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "s1", HeaderKind, "scommand", HeaderSentAt, "syesterday"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "s1", HeaderKind, "sevent", HeaderHeaders, "tk\x01i3"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "s1", HeaderKind, "sevent", HeaderAttributes, "sflat", HeaderSource, "f1.5"), []byte("raw"))
	f.Add("m", "T", "", "", int64(100), fuzzcheck.Join(HeaderVersion, "a1", "x-death", "tcount\x01l2\x01reason\x01sexpired"), []byte("raw"))
	f.Fuzz(func(t *testing.T, id, typ, ct, corr string, ts int64, hdrs, body []byte) {
		d := &amqp.Delivery{MessageId: short(id), Type: short(typ), ContentType: short(ct), CorrelationId: short(corr),
			Headers: fuzzTable(hdrs, 0), Body: body}
		if ts != 0 {
			d.Timestamp = time.Unix(ts, 0) // as the client reads the 64 bits of an AMQP timestamp
		}
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = fromDelivery(d) })
		if !bytes.Equal(env.Body, body) || env.ID != d.MessageId || env.Type != d.Type {
			t.Fatalf("delivery %+v mapped to %+v", d, env)
		}
		marked := fuzzcheck.Marked(t, env, "rabbitmq: ")
		out := env
		if marked {
			out = fuzzcheck.Failed(env)
		}
		p, err := toPublishing(out)
		if err != nil {
			t.Fatalf("cannot publish %+v again: %v", out, err)
		}
		if err := p.Headers.Validate(); err != nil {
			t.Fatalf("client cannot encode the headers of %+v: %v", out, err)
		}
		if marked {
			return
		}
		if again := fromDelivery(deliver(p)); !sameEnvelope(again, env) || again.OrderingKey != env.OrderingKey {
			t.Fatalf("mapped %+v, written back and mapped again %+v", env, again)
		}
	})
}

// short cuts s to an AMQP short string, as the wire delivers it.
func short(s string) string { return s[:min(len(s), maxShortString)] }

// fuzzTable builds an AMQP table from fuzzcheck.Pairs input. A value's
// first byte picks its field type, the rest is its content: 's' string,
// 'b' bytes, 'i' int32, 'l' int64, 'f' float64, 'B' bool, 'n' nil (void),
// 'T' timestamp, 'd' decimal, 'a' array of one string, 't' a nested table
// whose pairs are separated by 0x01 (one level). Anything else is a
// string of the whole value.
func fuzzTable(data []byte, depth int) amqp.Table {
	sep := byte(0)
	if depth > 0 {
		sep = 1
	}
	parts := bytes.Split(data, []byte{sep})
	if len(data) == 0 {
		return nil
	}
	tab := amqp.Table{}
	for i := 0; i < len(parts); i += 2 {
		var v []byte
		if i+1 < len(parts) {
			v = parts[i+1]
		}
		tab[short(string(parts[i]))] = fuzzValue(v, depth)
	}
	return tab
}

func fuzzValue(v []byte, depth int) any {
	if len(v) == 0 {
		return ""
	}
	rest := v[1:]
	n := int64(0)
	if len(rest) >= 8 {
		n = int64(binary.BigEndian.Uint64(rest))
	} else {
		n = int64(len(rest))
	}
	switch v[0] {
	case 's':
		return string(rest)
	case 'b':
		return rest
	case 'i':
		return int32(n)
	case 'l':
		return n
	case 'f':
		return float64(n) / 3
	case 'B':
		return len(rest)%2 == 1
	case 'n':
		return nil
	case 'T':
		return time.Unix(n%(1<<37), 0)
	case 'd':
		return amqp.Decimal{Scale: uint8(n), Value: int32(n)}
	case 'a':
		return []any{string(rest)}
	case 't':
		if depth == 0 {
			return fuzzTable(rest, 1)
		}
	}
	return string(v)
}

// tableSeed writes a table of strings and nested string tables as
// fuzzTable input.
func tableSeed(h amqp.Table) []byte {
	var kv []string
	for k, v := range h {
		switch v := v.(type) {
		case string:
			kv = append(kv, k, "s"+v)
		case amqp.Table:
			var inner []string
			for ik, iv := range v {
				inner = append(inner, ik, "s"+iv.(string))
			}
			kv = append(kv, k, "t"+string(bytes.Join(toBytes(inner), []byte{1})))
		}
	}
	return fuzzcheck.Join(kv...)
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

package nats

import (
	"maps"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// FuzzDecodeHeaders feeds arbitrary header values: decoding never panics,
// and either yields an envelope or flags bus.HeaderDecodeError.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add("t.T", "command", "2031-03-04T05:06:07Z", "Postbus-H-k", "v")
	f.Add("", "nope", "yesterday", "Postbus-A-_ZZ", "%G")
	f.Fuzz(func(t *testing.T, typ, kind, sent, key, val string) {
		h := natsio.Header{driver.KeyType: {typ}, driver.KeyKind: {kind}, driver.KeySentAt: {sent}, key: {val}}
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
	m := encodeMsg("p.q.x", env, "")
	got := decodeMsg(m.Header, m.Data)
	if got.ID != env.ID || got.Type != env.Type || got.Kind != env.Kind || string(got.Body) != "x" ||
		!maps.Equal(got.Headers, env.Headers) || !maps.Equal(got.Attributes, env.Attributes) {
		t.Errorf("round trip: got %+v, want %+v", got, env)
	}
}

// TestMsgIDSeparatesLegitimateResends: a sender's retry of a message keeps
// its Nats-Msg-Id, so the stream drops it; copies the bus makes again on
// purpose get their own.
func TestMsgIDSeparatesLegitimateResends(t *testing.T) {
	t.Parallel()
	sent := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	base := &bus.Envelope{
		ID: "id-1", Type: "a.B", Kind: bus.KindCommand, Body: []byte("x"), SentAt: sent,
		Headers: map[string]string{"k": "v"},
	}
	id := func(subject string, mutate func(*bus.Envelope), origin string) string {
		env := base.Clone()
		if mutate != nil {
			mutate(env)
		}
		return encodeMsg(subject, env, origin).Header.Get("Nats-Msg-Id")
	}
	first := id("p.q.x", nil, "")
	if first != "id-1@p.q.x" {
		t.Errorf("Nats-Msg-Id of a plain send = %q, want the ID and the subject", first)
	}
	same := map[string]func(*bus.Envelope){
		"sent again later": func(e *bus.Envelope) { e.SentAt = sent.Add(time.Second) },
		"new expiry":       func(e *bus.Envelope) { e.ExpiresAt = sent.Add(time.Hour) },
		"timers restamped": func(e *bus.Envelope) { e.SetHeader("postbus.timer.reach-queue-by", sent.Format(time.RFC3339Nano)) },
		"other body":       func(e *bus.Envelope) { e.Body = []byte("y") },
		"other header":     func(e *bus.Envelope) { e.SetHeader("k", "w") },
	}
	for name, mutate := range same {
		if got := id("p.q.x", mutate, ""); got != first {
			t.Errorf("%s: Nats-Msg-Id %q, want %q (a retry is the same message)", name, got, first)
		}
	}
	retry1 := func(e *bus.Envelope) {
		e.SetHeader(bus.HeaderDelayedRetries, "1")
		e.DueAt = sent.Add(10 * time.Second)
	}
	distinct := map[string]string{
		"other queue":            id("p.q.error", nil, ""),
		"delayed retry 1":        id("p.q.x", retry1, ""),
		"delayed retry 2":        id("p.q.x", func(e *bus.Envelope) { retry1(e); e.SetHeader(bus.HeaderDelayedRetries, "2") }, ""),
		"retry 1 after a replay": id("p.q.x", func(e *bus.Envelope) { retry1(e); e.DueAt = sent.Add(time.Minute) }, ""),
		"scheduled":              id("p.q.x", func(e *bus.Envelope) { e.DueAt = sent.Add(time.Hour) }, ""),
		"moved to error at t1":   id("p.q.x", func(e *bus.Envelope) { e.SetHeader(bus.HeaderFailureTime, "t1") }, ""),
		"moved to error at t2":   id("p.q.x", func(e *bus.Envelope) { e.SetHeader(bus.HeaderFailureTime, "t2") }, ""),
		"dead-lettered":          id("p.q.x", func(e *bus.Envelope) { e.SetHeader(bus.HeaderDeadLetterTime, "t1") }, ""),
		"replayed from copy 7":   id("p.q.x", nil, "S/error/7"),
		"replayed from copy 9":   id("p.q.x", nil, "S/error/9"),
	}
	seen := map[string]string{first: "plain send"}
	for name, got := range distinct {
		if prev, ok := seen[got]; ok {
			t.Errorf("%s has the Nats-Msg-Id of %s: %q", name, prev, got)
		}
		seen[got] = name
	}
	if id("p.q.x", nil, "S/error/7") != id("p.q.x", func(e *bus.Envelope) { e.SentAt = sent.Add(time.Minute) }, "S/error/7") {
		t.Error("handling the same delivery again changes the Nats-Msg-Id")
	}
}

func TestNames(t *testing.T) {
	if got := token.Escape("github.com/acme/sales.OrderPlaced"); got != "github_2Ecom_2Facme_2Fsales_2EOrderPlaced" {
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

// Package fuzzcheck holds what the transports' fuzz targets share: turning
// the fuzzer's bytes into header pairs, seeds from header pairs, a bound on
// the time one decode may take, and the properties every decoder of a
// received message keeps.
//
// A decoder turns what a broker delivered into a *bus.Envelope. Whatever
// arrives, it returns within a bounded time, without panicking, and either
// an envelope the transport's encoder writes back the same, or one marked
// with bus.HeaderDecodeError whose reason names the transport. The core
// sends a marked envelope to the error queue with that reason.
package fuzzcheck

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// Limit is how long one decode may take before a fuzz target reports a
// loop. A decode takes microseconds; the margin is for a loaded machine
// running the race detector.
const Limit = 10 * time.Second

// Pairs splits data at NUL bytes into key, value pairs: key NUL value NUL
// key NUL value … A trailing key without a value gets "". Keys may repeat.
func Pairs(data []byte) [][2]string {
	if len(data) == 0 {
		return nil
	}
	parts := bytes.Split(data, []byte{0})
	out := make([][2]string, 0, (len(parts)+1)/2)
	for i := 0; i < len(parts); i += 2 {
		p := [2]string{string(parts[i]), ""}
		if i+1 < len(parts) {
			p[1] = string(parts[i+1])
		}
		out = append(out, p)
	}
	return out
}

// Join is the inverse of Pairs for keys and values without NUL bytes:
// kv holds key, value, key, value … It builds seeds.
func Join(kv ...string) []byte {
	return []byte(strings.Join(kv, "\x00"))
}

// Within runs decode and fails t when it has not returned after Limit.
func Within(t testing.TB, decode func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		decode()
	}()
	timer := time.NewTimer(Limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("decoding did not return within %v", Limit)
	}
}

// Marked reports whether env carries a decode error, and fails t unless
// the reason starts with prefix (the transport's name and a colon).
func Marked(t testing.TB, env *bus.Envelope, prefix string) bool {
	t.Helper()
	if env == nil {
		t.Fatal("decoder returned a nil envelope")
	}
	reason, ok := env.Headers[bus.HeaderDecodeError]
	if !ok {
		return false
	}
	if !strings.HasPrefix(reason, prefix) || len(reason) == len(prefix) {
		t.Fatalf("decode error %q does not start with %q and say why", reason, prefix)
	}
	return true
}

// Size is the number of bytes the fields of env hold, but for the decode
// error's reason, to check that a decoder never makes more of a message
// than arrived.
func Size(env *bus.Envelope) int {
	n := len(env.ID) + len(env.Type) + len(env.ContentType) + len(env.CorrelationID) +
		len(env.Source) + len(env.Destination) + len(env.OrderingKey) + len(env.Body)
	for _, m := range [...]map[string]string{env.Headers, env.Attributes, env.StickyAttributes} {
		for k, v := range m {
			if k != bus.HeaderDecodeError {
				n += len(k) + len(v)
			}
		}
	}
	return n
}

// Same reports whether a and b hold the same message: every field equal,
// times as instants, nil and empty maps and bodies alike.
func Same(a, b *bus.Envelope) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Kind == b.Kind && bytes.Equal(a.Body, b.Body) &&
		a.ContentType == b.ContentType && a.CorrelationID == b.CorrelationID &&
		a.Source == b.Source && a.Destination == b.Destination && a.OrderingKey == b.OrderingKey &&
		a.SentAt.Equal(b.SentAt) && a.DueAt.Equal(b.DueAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		sameMap(a.Headers, b.Headers) && sameMap(a.Attributes, b.Attributes) &&
		sameMap(a.StickyAttributes, b.StickyAttributes)
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Failed is the copy of a marked envelope that the core sends to the error
// queue, with the failure headers it adds, so a fuzz target can check that
// the transport's encoder accepts it.
func Failed(env *bus.Envelope) *bus.Envelope {
	f := env.Clone()
	reason := env.Headers[bus.HeaderDecodeError]
	f.SetHeader(bus.HeaderFailureReason, reason)
	f.SetHeader(bus.HeaderFailureKind, "poison")
	f.SetHeader(bus.HeaderFailureEndpoint, "fuzz")
	f.SetHeader(bus.HeaderFailureQueue, "fuzz")
	f.SetHeader(bus.HeaderFailureTime, time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC).Format(time.RFC3339Nano))
	f.SetHeader(bus.HeaderFailureAttempts, "0")
	return f
}

// Envelopes are the seeds every transport's fuzz target encodes: a plain
// command, events with every field set and awkward header keys, values and
// IDs (spaces, percent signs, line breaks, NUL and invalid UTF-8), replies
// with and without a binary body, and kinds the bus does not define.
func Envelopes() []*bus.Envelope {
	sent := time.Date(2031, 3, 4, 5, 6, 7, 890, time.UTC)
	event := func(id, orderingKey, sticky string, headers map[string]string) *bus.Envelope {
		return &bus.Envelope{ID: id, Type: "a.B", Kind: bus.KindEvent, CorrelationID: "c", Source: "s",
			Destination: "d", SentAt: sent, DueAt: sent.Add(time.Hour), ExpiresAt: sent.Add(2 * time.Hour),
			OrderingKey: orderingKey, Headers: headers, Attributes: map[string]string{"tenant": "acme"},
			StickyAttributes: map[string]string{"s": sticky}}
	}
	return []*bus.Envelope{
		{ID: "0190aa00-0000-7000-8000-000000000001", Type: "sales.PlaceOrder", Kind: bus.KindCommand,
			Body: []byte(`{"id":1}`), ContentType: "application/json", SentAt: sent},
		event("id 2", "k", "\xff", map[string]string{"k": " v\n", "": "empty key", "h:": "nested prefix"}),
		event("id%2", "k\x00", "\x00", map[string]string{"Mixed.Case_key": " v\n", "100%": "%"}),
		{ID: "r", Type: "x", Kind: bus.KindReply},
		{ID: "b", Type: "x", Kind: bus.KindReply, Body: []byte{0, 1, 0xff}},
		{ID: "k7", Type: "x", Kind: 7},
		{ID: "k9", Type: "x", Kind: 9},
	}
}

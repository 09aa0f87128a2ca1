package backend_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

func fullEnvelope() *backend.Envelope {
	now := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	return &backend.Envelope{
		ID: "01938a7e-0000-7000-8000-000000000001", Type: "sales.PlaceOrder", Kind: backend.KindEvent,
		Body: []byte(`{"a":1}`), ContentType: "application/json",
		Headers: map[string]string{"h": "v", "empty": ""}, CorrelationID: "c",
		Attributes: map[string]string{"a": "1"}, StickyAttributes: map[string]string{"s": "2"},
		Source: "shop", Destination: "sales", SentAt: now, DueAt: now.Add(time.Hour), ExpiresAt: now.Add(2 * time.Hour),
	}
}

func TestEnvelopeCodecRoundTrip(t *testing.T) {
	t.Parallel()
	for _, e := range []*backend.Envelope{fullEnvelope(), {ID: "x"}} {
		got, err := backend.UnmarshalEnvelope(backend.MarshalEnvelope(e))
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Body) == 0 {
			got.Body = e.Body // nil and empty are the same on the wire
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

func TestEnvelopeCodecRejectsGarbage(t *testing.T) {
	t.Parallel()
	good := backend.MarshalEnvelope(fullEnvelope())
	for name, data := range map[string][]byte{
		"empty":     nil,
		"magic":     []byte("XX\x01"),
		"version":   {'P', 9, 1},
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
	} {
		if _, err := backend.UnmarshalEnvelope(data); !errors.Is(err, backend.ErrMalformedEnvelope) {
			t.Errorf("%s: err = %v, want ErrMalformedEnvelope", name, err)
		}
	}
}

func FuzzUnmarshalEnvelope(f *testing.F) {
	f.Add(backend.MarshalEnvelope(fullEnvelope()))
	f.Add(backend.MarshalEnvelope(&backend.Envelope{}))
	f.Add([]byte{'P', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := backend.UnmarshalEnvelope(data)
		if err != nil {
			if !errors.Is(err, backend.ErrMalformedEnvelope) {
				t.Fatalf("error %v does not wrap ErrMalformedEnvelope", err)
			}
			return
		}
		again, err := backend.UnmarshalEnvelope(backend.MarshalEnvelope(e))
		if err != nil {
			t.Fatalf("re-encoding a decoded envelope fails: %v", err)
		}
		if again.ID != e.ID || string(again.Body) != string(e.Body) || len(again.Headers) != len(e.Headers) {
			t.Fatalf("re-encoding changed the envelope")
		}
	})
}

func TestKindTextRoundTrips(t *testing.T) {
	for _, k := range []backend.Kind{0, backend.KindCommand, backend.KindEvent, backend.KindReply, 200} {
		text, _ := k.MarshalText()
		var back backend.Kind
		if err := back.UnmarshalText(text); err != nil || back != k {
			t.Errorf("kind %d -> %q -> %d, %v", k, text, back, err)
		}
	}
	var k backend.Kind
	if err := k.UnmarshalText([]byte("telegram")); err == nil {
		t.Error("an unknown kind name decoded")
	}
}

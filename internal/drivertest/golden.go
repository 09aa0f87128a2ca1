package drivertest

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// WireEnvelopes are the envelopes whose encoding a transport's golden test
// pins: a plain command; one with every field set and values that need
// escaping on some broker (blanks at the edges, control bytes, '%',
// U+FFFE, map keys with '.', ' ', ':' and non-ASCII, empty keys and
// values); an event of a kind unknown today, with no body. Every string is
// valid UTF-8, so golden files hold them exactly.
func WireEnvelopes() []*bus.Envelope {
	at := time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC)
	return []*bus.Envelope{
		{ID: "id-1", Type: "acme.Ordered", Kind: bus.KindCommand, Body: []byte(`{"n":1}`), ContentType: "application/json"},
		{
			ID: "id-2", Type: "a.B", Kind: bus.KindReply, Body: []byte("x\x00y"), ContentType: "text/plain",
			CorrelationID: " corr\t", Source: "orders", Destination: "billing", SentAt: at, DueAt: at.Add(time.Hour),
			ExpiresAt: at.Add(2 * time.Hour), OrderingKey: "key%1",
			Headers:          map[string]string{"Mixed.Case_key": "v\n\x01", "": "empty key", "ñ": "ñandú", "h:colon": "a:b"},
			Attributes:       map[string]string{"k": "", "tenant": "acme"},
			StickyAttributes: map[string]string{"trace": "t\x7f1", "sp ace": " lead\uFFFE"},
		},
		{ID: "id-3", Type: "e.Event", Kind: bus.Kind(9)},
	}
}

// Golden compares got with the JSON in the file at path, read into a new
// value of got's type. With POSTBUS_UPDATE_GOLDEN=1 it first writes got
// there: run so once when the format changes on purpose, and commit the
// file. It returns what the file holds, for the decode half of the test.
func Golden[T any](t testing.TB, path string, got T) T {
	t.Helper()
	if os.Getenv("POSTBUS_UPDATE_GOLDEN") == "1" {
		js, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want T
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("wire format changed from %s:\n got %+v\nwant %+v", path, got, want)
	}
	return want
}

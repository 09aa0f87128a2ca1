package postgres

import (
	"bytes"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/fuzzcheck"
)

// FuzzDecodeRow feeds decodeRow any transport row: any ID, body and
// envelope column. It returns in bounded time without panicking and keeps
// the body; a row it decodes is written back the same by newSendRow; one
// it cannot read is marked with a reason and keeps the row's ID.
func FuzzDecodeRow(f *testing.F) {
	for _, env := range fuzzcheck.Envelopes() {
		row, err := newSendRow("q", env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(row.id, row.body, row.envelope)
	}
	// Rows another program inserted.
	f.Add("foreign-1", []byte(`{"id":1}`), []byte(nil))
	f.Add("foreign-2", []byte("x"), []byte(`{"type":"legacy"}`))
	f.Add("foreign-3", []byte{}, []byte{'P', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add("", []byte(nil), []byte{'P', 9, 1})
	f.Fuzz(func(t *testing.T, id string, body, envelope []byte) {
		var env *bus.Envelope
		fuzzcheck.Within(t, func() { env = decodeRow(id, body, envelope) })
		if !bytes.Equal(env.Body, body) {
			t.Fatalf("body %q became %q", body, env.Body)
		}
		if n := fuzzcheck.Size(env); n > len(id)+len(body)+len(envelope)+64 {
			t.Fatalf("%d bytes of input decoded to %d", len(id)+len(body)+len(envelope), n)
		}
		if fuzzcheck.Marked(t, env, "postgres: ") {
			if env.ID != id {
				t.Fatalf("row %q marked with ID %q", id, env.ID)
			}
			if _, err := newSendRow("error", fuzzcheck.Failed(env)); err != nil {
				t.Fatalf("the error-queue copy of %+v cannot be stored: %v", env, err)
			}
			return
		}
		row, err := newSendRow("q", env)
		if err != nil {
			t.Fatalf("cannot store %+v again: %v", env, err)
		}
		if again := decodeRow(row.id, row.body, row.envelope); !fuzzcheck.Same(again, env) {
			t.Fatalf("decoded %+v, written back and decoded again %+v", env, again)
		}
	})
}

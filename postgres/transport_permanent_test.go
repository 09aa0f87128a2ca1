package postgres_test

import (
	"errors"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// TestTransportOversizeIsPermanent: a body over MaxMessageSize fails with an
// error that also matches bus.ErrPermanent, so a scheduled one goes to the
// error queue instead of being retried for ever.
func TestTransportOversizeIsPermanent(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	tr := newTransport(t, pool, freshSchema(t, pool), postgres.TransportOptions{MaxMessageSize: 10})
	env := envelopeTo("q", "big")
	env.Body = []byte(`{"too":"large"}`)
	if err := tr.Send(t.Context(), "q", env); !errors.Is(err, bus.ErrPermanent) || !errors.Is(err, postgres.ErrMessageTooLarge) {
		t.Errorf("Send of an oversize body = %v, want bus.ErrPermanent and ErrMessageTooLarge", err)
	}
}

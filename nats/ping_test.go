package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus/nats"
)

// Ping makes a round trip to the server, and fails once the connection is
// closed.
func TestPingFollowsTheConnection(t *testing.T) {
	t.Parallel()
	nc := connect(t, serverURL())
	tr, err := nats.New(nc, uniqueOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	nc.Close()
	if err := tr.Ping(ctx); err == nil {
		t.Fatal("ping on a closed connection succeeded")
	}
}

package kafka_test

import (
	"context"
	"testing"
	"time"
)

// Ping reaches a broker of the cluster, and fails once the transport is
// closed.
func TestPingFollowsTheClient(t *testing.T) {
	t.Parallel()
	tr, _ := newTransport(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Ping(ctx); err == nil {
		t.Fatal("ping through a closed transport succeeded")
	}
}

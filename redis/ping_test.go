package redis_test

import (
	"context"
	"testing"
	"time"
)

// Ping answers through the client, and fails once it is closed.
func TestPingFollowsTheClient(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	tr := mustNew(t, rdb, namespace(t, connect(t)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	_ = rdb.Close()
	if err := tr.Ping(ctx); err == nil {
		t.Fatal("ping through a closed client succeeded")
	}
}

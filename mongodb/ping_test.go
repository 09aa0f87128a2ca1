package mongodb_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus/mongodb"
)

// Ping answers through the client, and fails once it is disconnected.
func TestPingFollowsTheClient(t *testing.T) {
	t.Parallel()
	client := newClient(t)
	p, err := mongodb.New(client.Database(testDatabase), mongodb.Options{Collection: randomName("ping")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := client.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Ping(ctx); err == nil {
		t.Fatal("ping through a disconnected client succeeded")
	}
}

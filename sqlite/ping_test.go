package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/postbus/bus/sqlite"
)

// Ping answers while the database is open, and fails once it is closed.
func TestPingFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	p, err := sqlite.Open(filepath.Join(t.TempDir(), "postbus.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Ping(ctx); err == nil {
		t.Fatal("ping on a closed database succeeded")
	}
}

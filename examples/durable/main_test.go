package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/postbus/bus/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScheduleThenDeliver runs both lives of the example on a fresh file
// and checks that the file is empty afterwards: every reminder delivered.
func TestScheduleThenDeliver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "durable.db")
	if err := schedule(ctx, path); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	store, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if n, err := store.Len(ctx); err != nil || n != 3 {
		t.Fatalf("rows after schedule = %d, %v; want 3", n, err)
	}
	start := time.Now()
	if err := deliver(ctx, path); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("deliver returned after %v, before the last reminder was due", el)
	}
	if n, err := store.Len(ctx); err != nil || n != 0 {
		t.Errorf("rows after deliver = %d, %v; want 0", n, err)
	}
}

package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/postbus/bus/sqlite"
)

func TestGoldenSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	seed(t, p)
	env := map[string]string{"POSTBUS_SQLITE_PATH": path}
	checkGolden(t, openBackends, env, p)
}

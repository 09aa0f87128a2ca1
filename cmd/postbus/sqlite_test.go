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
	for _, c := range goldenCases {
		r := runApp(t, openBackends, env, c.args...)
		if r.code != exitOK {
			t.Errorf("%s: exit %d, stderr %s", c.name, r.code, r.stderr)
		}
		golden(t, c.name, r.stdout)
	}
	assertUnchanged(t, p, p)
}

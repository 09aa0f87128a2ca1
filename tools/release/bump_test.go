package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bump leaves a set the check accepts at the new version: VERSION, every
// requirement of the set and go.work's replaces.
func TestBumpMovesTheWholeSet(t *testing.T) {
	t.Parallel()
	dst, _ := copyModFiles(t)
	r, err := loadRepo(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := bump(r, "v0.4.0"); err != nil {
		t.Fatal(err)
	}
	if r, err = loadRepo(dst); err != nil {
		t.Fatal(err)
	}
	if r.version != "v0.4.0" {
		t.Fatalf("VERSION = %s", r.version)
	}
	if err := checkModules(r); err != nil {
		t.Fatalf("check after bump: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(dst, "postgres", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "github.com/postbus/bus v0.4.0") {
		t.Fatalf("postgres/go.mod after bump:\n%s", data)
	}
	if err := bump(r, "0.5"); err == nil {
		t.Fatal("bump accepted 0.5")
	}
}

func TestTidyDropsOnlyTheSetsSums(t *testing.T) {
	t.Parallel()
	r := &repo{prefix: "github.com/postbus/bus"}
	name := filepath.Join(t.TempDir(), "go.sum")
	writeFile(t, name, "github.com/postbus/bus v0.3.0 h1:x=\ngithub.com/postbus/bus/postgres v0.3.0/go.mod h1:y=\ngithub.com/postbus/busy v1.0.0 h1:z=\n")
	if err := dropOwnSums(r, name); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "github.com/postbus/busy v1.0.0 h1:z=\n" {
		t.Fatalf("go.sum = %q", data)
	}
}

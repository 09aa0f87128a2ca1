package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyModFiles copies VERSION, go.work and every go.mod of the repository
// into a temporary folder, so a test can break one without touching the tree.
func copyModFiles(t *testing.T) (string, *repo) {
	t.Helper()
	root, err := findRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	files := []string{"VERSION", "go.work"}
	for _, m := range r.modules {
		files = append(files, filepath.Join(m.dir, "go.mod"))
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dst, f), string(data))
	}
	return dst, r
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, name, content string) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, name, string(data)+content)
}

func TestCheckPassesOnThisRepository(t *testing.T) {
	t.Parallel()
	root, err := findRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.modules) < 10 {
		t.Fatalf("go.work names %d modules, want every module of the repository", len(r.modules))
	}
	if err := checkModules(r); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// A replace directive in any module of the set fails the check, naming the
// go.mod and the directive.
func TestCheckFailsWhenAGoModHasAReplace(t *testing.T) {
	t.Parallel()
	_, orig := copyModFiles(t)
	for _, m := range orig.modules {
		t.Run(m.dir, func(t *testing.T) {
			t.Parallel()
			dst, _ := copyModFiles(t)
			gomod := filepath.Join(dst, m.dir, "go.mod")
			appendFile(t, gomod, "\nreplace github.com/postbus/bus => ../\n")
			r, err := loadRepo(dst)
			if err != nil {
				t.Fatal(err)
			}
			err = checkModules(r)
			if err == nil {
				t.Fatal("check passed with a replace directive")
			}
			want := filepath.ToSlash(filepath.Join(m.dir, "go.mod")) + ": replace github.com/postbus/bus => ../"
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		})
	}
}

// A requirement of another module of the set at a version other than
// VERSION fails the check.
func TestCheckFailsWhenARequirementIsNotAtVersion(t *testing.T) {
	t.Parallel()
	dst, _ := copyModFiles(t)
	gomod := filepath.Join(dst, "postgres", "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadRepo(dst)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(data), "github.com/postbus/bus "+r.version, "github.com/postbus/bus v0.2.9", 1)
	if broken == string(data) {
		t.Fatalf("postgres/go.mod does not require github.com/postbus/bus %s", r.version)
	}
	writeFile(t, gomod, broken)
	if r, err = loadRepo(dst); err != nil {
		t.Fatal(err)
	}
	err = checkModules(r)
	if err == nil {
		t.Fatal("check passed with a requirement at v0.2.9")
	}
	want := "postgres/go.mod: requires github.com/postbus/bus v0.2.9, not VERSION " + r.version
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

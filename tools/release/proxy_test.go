package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/zip"
)

// gitRepo makes a repository of two modules, the root and drv/, committed,
// with go.work and VERSION as the check wants them.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not on PATH; the release check needs it")
	}
	dir := t.TempDir()
	files := map[string]string{
		"VERSION":    "v0.3.0\n",
		"go.work":    "go 1.26.0\n\nuse (\n\t.\n\t./drv\n)\n\nreplace (\n\texample.com/set v0.3.0 => ./\n\texample.com/set/drv v0.3.0 => ./drv\n)\n",
		"go.mod":     "module example.com/set\n\ngo 1.26.0\n",
		"set.go":     "package set\n",
		"drv/go.mod": "module example.com/set/drv\n\ngo 1.26.0\n\nrequire example.com/set v0.3.0\n",
		"drv/drv.go": "package drv\n",
		".gitignore": "/drv/drv-binary\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "set"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

func TestProxyHoldsEachModuleAtVersion(t *testing.T) {
	t.Parallel()
	root := gitRepo(t)
	writeFile(t, filepath.Join(root, "drv", "drv-binary"), "ignored build output")
	writeFile(t, filepath.Join(root, "drv", "new.go"), "package drv\n") // untracked, not ignored
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	var log bytes.Buffer
	if err := buildProxy(r, proxy, &log); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"example.com/set/@v/v0.3.0.info", "example.com/set/@v/v0.3.0.mod", "example.com/set/@v/list", "example.com/set/drv/@v/v0.3.0.mod"} {
		if _, err := os.Stat(filepath.Join(proxy, f)); err != nil {
			t.Error(err)
		}
	}
	cf, err := zip.CheckZip(modVersion("example.com/set/drv", "v0.3.0"), filepath.Join(proxy, "example.com/set/drv/@v/v0.3.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	valid := slices.Sorted(slices.Values(cf.Valid))
	if got := strings.Join(valid, " "); got != "example.com/set/drv@v0.3.0/drv.go example.com/set/drv@v0.3.0/go.mod example.com/set/drv@v0.3.0/new.go" {
		t.Fatalf("drv zip holds %q, want the committed, the untracked and not the ignored file", got)
	}
	if !strings.Contains(log.String(), "differs from the last commit in 1 files") {
		t.Fatalf("no note of the uncommitted file:\n%s", log.String())
	}
}

// A file the module zip would silently leave out (here: in vendor/) fails
// the build of the proxy, naming it.
func TestProxyFailsOnAFileTheZipLeavesOut(t *testing.T) {
	t.Parallel()
	root := gitRepo(t)
	writeFile(t, filepath.Join(root, "drv", "vendor", "example.org", "dep", "dep.go"), "package dep\n")
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	err = buildProxy(r, t.TempDir(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "drv: vendor/example.org/dep/dep.go is left out of the module zip") {
		t.Fatalf("err = %v, want vendor/example.org/dep/dep.go named", err)
	}
}

// A replace in a go.mod fails the build of the proxy too.
func TestProxyFailsWhenAGoModHasAReplace(t *testing.T) {
	t.Parallel()
	root := gitRepo(t)
	appendFile(t, filepath.Join(root, "drv", "go.mod"), "\nreplace example.com/set => ../\n")
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	err = buildProxy(r, t.TempDir(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "drv/go.mod: replace example.com/set => ../") {
		t.Fatalf("err = %v, want the replace named", err)
	}
}

func TestEveryLibraryModuleIsInTheSmokeApp(t *testing.T) {
	t.Parallel()
	root, err := findRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	imports, err := smokeImports()
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]bool{}
	for _, p := range imports {
		imported[p] = true
	}
	for _, m := range r.modules {
		if !notLibrary(m) && !imported[m.path] {
			t.Errorf("testdata/smokeapp/main.go does not import %s", m.path)
		}
	}
}

func TestNextVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base string
		b    bumpKind
		want string
	}{
		{"v0.3.0", bumpPatch, "v0.3.1"},
		{"v0.3.2", bumpMinor, "v0.4.0"},
		{"v0.3.2", bumpMajor, "v0.4.0"},
		{"v1.2.3", bumpMajor, "v2.0.0"},
	} {
		if got := nextVersion(tc.base, tc.b); got != tc.want {
			t.Errorf("nextVersion(%s, %v) = %s, want %s", tc.base, tc.b, got, tc.want)
		}
	}
}

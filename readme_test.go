package bus_test

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// backquotedGo finds the file names and patterns the README gives in
// backquotes: `bus.go`, `memory_*.go`.
var backquotedGo = regexp.MustCompile("`([A-Za-z0-9_*?\\[\\]/-]+\\.go)`")

// TestReadmeNamesEveryFileModuleAndPage keeps README.md's layout, code map
// and docs list complete: every non-test .go file of the core and of the
// driver kit in driver/, of package backend in backend/ and of the
// dispatcher in internal/dispatch/ (by name or by a pattern such as
// `memory_*.go`), every module folder of go.work, and every page
// under docs/ must be mentioned, and the README must still open with the
// two commands a newcomer runs first.
func TestReadmeNamesEveryFileModuleAndPage(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(src)

	// The first lines: the title, then the two commands.
	lines := strings.SplitN(readme, "\n", 6)
	if len(lines) < 5 || lines[2] != "```sh" ||
		!strings.HasPrefix(lines[3], "go run ./examples/quickstart") || !strings.HasPrefix(lines[4], "make test") {
		t.Errorf("README.md must open with `go run ./examples/quickstart` and `make test`; it opens with:\n%s",
			strings.Join(lines[:min(5, len(lines))], "\n"))
	}

	var patterns []string
	for _, m := range backquotedGo.FindAllStringSubmatch(readme, -1) {
		patterns = append(patterns, m[1])
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	kit, err := filepath.Glob("driver/*.go") // the driver kit's files, named with their folder
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, kit...)
	seams, err := filepath.Glob("backend/*.go") // the backend package's files, likewise
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, seams...)
	disp, err := filepath.Glob("internal/dispatch/*.go") // the dispatcher's files, likewise
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, disp...)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "driver/doc.go" || f == "backend/doc.go" || f == "internal/dispatch/doc.go" {
			continue
		}
		named := false
		for _, p := range patterns {
			if ok, _ := path.Match(p, f); ok {
				named = true
				break
			}
		}
		if !named {
			t.Errorf("README.md: the code map does not name %s (give it in backquotes, alone or in a pattern)", f)
		}
	}

	for _, dir := range workModules(t) {
		if !strings.Contains(readme, "`"+dir+"/`") && !strings.Contains(readme, "`"+dir+"`") {
			t.Errorf("README.md: the layout does not name the module folder `%s/`", dir)
		}
	}

	err = filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".md" {
			return err
		}
		if link := "](" + filepath.ToSlash(p) + ")"; !strings.Contains(readme, link) && !strings.Contains(readme, "]("+filepath.ToSlash(p)+"#") {
			t.Errorf("README.md: the docs list does not link %s", filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// workModules returns the module folders that go.work uses, without the
// core's own "." and without the leading "./".
func workModules(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("go.work")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var dirs []string
	inUse := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		line = strings.TrimSpace(line)
		switch {
		case line == "use (":
			inUse = true
			continue
		case inUse && line == ")":
			inUse = false
			continue
		case strings.HasPrefix(line, "use "):
			line = strings.TrimSpace(strings.TrimPrefix(line, "use "))
		case !inUse:
			continue
		}
		if dir := path.Clean(strings.Trim(line, `"`)); dir != "." && dir != "" {
			dirs = append(dirs, dir)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("go.work uses no module folder")
	}
	return dirs
}

package sqlstore

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/postbus/bus/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the guide's code blocks that differ from the code")

const storeGuide = "../../docs/guide/writing-a-store.md"

// The guide shows the Dialect as it is, and its table of parts names every
// part of the kit: each New… constructor, each statement and hook struct.
func TestGuideMatchesTheKit(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("dialect.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "type Dialect struct {")
	end := strings.Index(s[start:], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatal("dialect.go: no Dialect struct")
	}
	docblock.Check(t, storeGuide, map[string]string{"dialect": s[start : start+end+3]}, *update)

	doc := partNames(t)
	var code []string
	files := kitFiles(t)
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				// The constructors of the parts (NewToken makes a value,
				// not a part).
				if d.Recv == nil && strings.HasPrefix(d.Name.Name, "New") && d.Name.Name != "NewToken" {
					code = append(code, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					if n := ts.Name.Name; strings.HasSuffix(n, "SQL") || strings.HasSuffix(n, "Hooks") || strings.HasSuffix(n, "Config") {
						code = append(code, n)
					}
				}
			}
		}
	}
	slices.Sort(code)
	// The table names more than the constructors and statement structs (the
	// parts' types, their interfaces); every one of those must be in it.
	var missing []string
	for _, n := range code {
		if !slices.Contains(doc, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: the table of parts does not name %v", storeGuide, missing)
	}
	for _, n := range doc {
		if !declared(files, n) {
			t.Errorf("%s: the table of parts names %s, which the kit does not declare", storeGuide, n)
		}
	}
}

// partNames returns the names in backquotes in the first three columns of
// the guide's table of parts: the kit's types, constructors, statement
// structs and hooks.
func partNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(storeGuide)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- code: parts -->\n")
	if !ok {
		t.Fatalf("%s: no table marked <!-- code: parts -->", storeGuide)
	}
	var names []string
	for i, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "|") {
			break
		}
		if i < 2 { // header and separator
			continue
		}
		cells := strings.Split(strings.Trim(row, "|"), "|")
		for _, c := range cells[:min(3, len(cells))] {
			for j, part := range strings.Split(c, "`") {
				if j%2 == 1 {
					names = append(names, part)
				}
			}
		}
	}
	return names
}

// kitFiles parses the package's non-test files.
func kitFiles(t *testing.T) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// declared reports whether the files declare a top-level name.
func declared(files []*ast.File, name string) bool {
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == name {
					return true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == name {
						return true
					}
				}
			}
		}
	}
	return false
}

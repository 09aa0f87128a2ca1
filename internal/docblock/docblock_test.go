package docblock

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const page = "# Title\n\n<!-- code: ddl -->\n```sql\nCREATE TABLE t (\n\ta int,\n\tb text,\n\tPRIMARY KEY (a)\n);\n```\n\n<!-- code: cols -->\n| column | meaning |\n|---|---|\n| `a` | one |\n| `b`, `c` | two |\n\ntext\n"

func writePage(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckAcceptsTheSameBlock(t *testing.T) {
	t.Parallel()
	Check(t, writePage(t), map[string]string{"ddl": "CREATE TABLE t (\n\ta int,\n\tb text,\n\tPRIMARY KEY (a)\n);\n"}, false)
}

func TestCheckUpdateRewritesOnlyTheBlock(t *testing.T) {
	t.Parallel()
	path := writePage(t)
	Check(t, path, map[string]string{"ddl": "CREATE TABLE t (a int);"}, true)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(page, "CREATE TABLE t (\n\ta int,\n\tb text,\n\tPRIMARY KEY (a)\n);", "CREATE TABLE t (a int);", 1)
	if string(got) != want {
		t.Fatalf("page after update:\n%s", got)
	}
}

func TestCheckFailsOnADifferentBlock(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]map[string]string{
		"different": {"ddl": "CREATE TABLE t (a int);"},
		"unmarked":  {"ddl": "CREATE TABLE t (\n\ta int,\n\tb text,\n\tPRIMARY KEY (a)\n);", "other": "x"},
		"unchecked": {},
	} {
		ft := &fakeT{TB: t}
		Check(ft, writePage(t), want, false)
		if !ft.failed {
			t.Errorf("%s: Check passed", name)
		}
	}
}

func TestTableAndColumns(t *testing.T) {
	t.Parallel()
	path := writePage(t)
	if got := Table(t, path, "cols"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Table = %q", got)
	}
	if got := Columns("CREATE TABLE t (\n\ta int,\n\t\"b\" text,\n\tPRIMARY KEY (a)\n)"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Columns = %q", got)
	}
	if got := SameNames([]string{"a", "c"}, []string{"a", "b"}); got != "missing from the doc: b; in the doc but not in the code: c" {
		t.Errorf("SameNames = %q", got)
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
func (f *fakeT) Helper()               {}

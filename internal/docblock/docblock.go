// Package docblock keeps the code blocks and tables of the Markdown docs
// true to the code they describe. A block to check is marked by an HTML
// comment on the line before it, invisible when the page is rendered:
//
//	<!-- code: migrations -->
//	```sql
//	…
//	```
//
// A driver's test computes what the block must hold (the SQL its
// statements are, say) and calls Check, which fails the test when the doc
// says something else, or, with update set (the test's -update flag),
// rewrites the block in place. A marked table is read with Table, so a test
// can compare the names in its first column with the code's.
package docblock

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var marker = regexp.MustCompile(`^<!-- code: ([A-Za-z0-9_.\-]+) -->$`)

// block is one marked element of a page: a fenced code block (body is
// what lies between the fences) or a table (body is its lines).
type block struct {
	name       string
	fence      bool
	start, end int // lines of the body: [start, end)
}

// parse finds the marked blocks of a page, split in lines.
func parse(lines []string) (map[string]block, error) {
	blocks := map[string]block{}
	for i, line := range lines {
		m := marker.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		name := m[1]
		if _, dup := blocks[name]; dup {
			return nil, fmt.Errorf("line %d: block %q marked twice", i+1, name)
		}
		if i+1 >= len(lines) {
			return nil, fmt.Errorf("line %d: marker %q ends the page", i+1, name)
		}
		next := lines[i+1]
		switch {
		case strings.HasPrefix(next, "```"):
			end := slices.IndexFunc(lines[i+2:], func(l string) bool { return strings.TrimSpace(l) == "```" })
			if end < 0 {
				return nil, fmt.Errorf("line %d: code block %q is not closed", i+2, name)
			}
			blocks[name] = block{name: name, fence: true, start: i + 2, end: i + 2 + end}
		case strings.HasPrefix(next, "|"):
			end := i + 1
			for end < len(lines) && strings.HasPrefix(lines[end], "|") {
				end++
			}
			blocks[name] = block{name: name, start: i + 1, end: end}
		default:
			return nil, fmt.Errorf("line %d: marker %q is not followed by a code block or a table", i+1, name)
		}
	}
	return blocks, nil
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(src), "\n")
}

// Check compares the marked code blocks of the page at path with want
// (block name → text, without the fences; a trailing newline is ignored).
// Every marked code block of the page must be in want and every name of
// want marked on the page, so a block whose code went away fails too.
// With update, differing blocks are rewritten and the page saved instead.
func Check(t testing.TB, path string, want map[string]string, update bool) {
	t.Helper()
	lines := readLines(t, path)
	blocks, err := parse(lines)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for name, b := range blocks {
		if _, ok := want[name]; b.fence && !ok {
			t.Errorf("%s:%d: block %q is marked but nothing checks it", path, b.start-1, name)
		}
	}
	// Rewrite from the bottom up, so earlier line numbers stay valid.
	var order []block
	for name := range want {
		b, ok := blocks[name]
		if !ok || !b.fence {
			t.Errorf("%s: no code block marked <!-- code: %s -->", path, name)
			continue
		}
		order = append(order, b)
	}
	slices.SortFunc(order, func(a, b block) int { return b.start - a.start })
	changed := false
	for _, b := range order {
		got := strings.Join(lines[b.start:b.end], "\n")
		exp := strings.TrimSuffix(want[b.name], "\n")
		if got == exp {
			continue
		}
		if !update {
			t.Errorf("%s:%d: block %q differs from the code (go test -run %s -update rewrites it):\n%s",
				path, b.start, b.name, t.Name(), firstDifference(got, exp))
			continue
		}
		lines = slices.Concat(lines[:b.start], strings.Split(exp, "\n"), lines[b.end:])
		changed = true
	}
	if changed {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote the blocks that differed from the code", path)
	}
}

// firstDifference shows the first line where the doc and the code part.
func firstDifference(doc, code string) string {
	d, c := strings.Split(doc, "\n"), strings.Split(code, "\n")
	for i := range max(len(d), len(c)) {
		dl, cl := "(end of block)", "(end of block)"
		if i < len(d) {
			dl = fmt.Sprintf("%q", d[i])
		}
		if i < len(c) {
			cl = fmt.Sprintf("%q", c[i])
		}
		if dl != cl {
			return fmt.Sprintf("  line %d of the block\n  doc:  %s\n  code: %s", i+1, dl, cl)
		}
	}
	return "  (same lines)"
}

// Table returns, for each body row of the table marked name on the page at
// path, the names in backquotes in its first cell (a row may describe
// several columns: "`failures`, `last_error`").
func Table(t testing.TB, path, name string) []string {
	t.Helper()
	blocks, err := parse(readLines(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, ok := blocks[name]
	if !ok || b.fence {
		t.Fatalf("%s: no table marked <!-- code: %s -->", path, name)
	}
	lines := readLines(t, path)[b.start:b.end]
	if len(lines) < 2 {
		t.Fatalf("%s: table %q has no body", path, name)
	}
	var names []string
	for _, row := range lines[2:] { // header and separator first
		cells := strings.Split(strings.Trim(row, "|"), "|")
		names = append(names, backquoted(cells[0])...)
	}
	return names
}

func backquoted(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(s[i+1:], '`')
		if j < 0 {
			return out
		}
		out = append(out, s[i+1:i+1+j])
		s = s[i+2+j:]
	}
}

// Columns returns the column names of a CREATE TABLE statement: the first
// word of each line inside its parentheses that is not a table constraint.
// It expects the layout the drivers use: one column per line.
func Columns(createTable string) []string {
	open, closing := strings.IndexByte(createTable, '('), strings.LastIndexByte(createTable, ')')
	if open < 0 || closing < open {
		return nil
	}
	var cols []string
	for _, line := range strings.Split(createTable[open+1:closing], "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "PRIMARY", "UNIQUE", "CONSTRAINT", "FOREIGN", "CHECK", "--":
			continue
		}
		cols = append(cols, strings.Trim(f[0], `",`))
	}
	return cols
}

// SameNames reports, as a sentence for a test failure, the names that only
// one of doc and code has; "" when they hold the same names.
func SameNames(doc, code []string) string {
	var onlyDoc, onlyCode []string
	for _, n := range doc {
		if !slices.Contains(code, n) {
			onlyDoc = append(onlyDoc, n)
		}
	}
	for _, n := range code {
		if !slices.Contains(doc, n) {
			onlyCode = append(onlyCode, n)
		}
	}
	if len(onlyDoc) == 0 && len(onlyCode) == 0 {
		return ""
	}
	var b strings.Builder
	if len(onlyCode) > 0 {
		fmt.Fprintf(&b, "missing from the doc: %s", strings.Join(onlyCode, ", "))
	}
	if len(onlyDoc) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "in the doc but not in the code: %s", strings.Join(onlyDoc, ", "))
	}
	return b.String()
}

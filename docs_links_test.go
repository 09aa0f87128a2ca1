package bus_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink finds the target of a Markdown link: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown page: lower case, spaces to '-', punctuation other than '-'
// and '_' dropped, "-1", "-2"… after repeats. Headings inside fenced code
// are not headings.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// inlineCode matches a code span.
var inlineCode = regexp.MustCompile("`[^`\n]*`")

// prose returns src without its fenced code blocks and code spans, where
// "](x)" is code, not a link.
func prose(src string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(inlineCode.ReplaceAllString(line, "") + "\n")
		}
	}
	return b.String()
}

// TestDocsLinksResolve checks every relative link of README.md and the
// pages under docs/: the page exists and, for a link into a section, the
// section does (so a section moved to another page, such as a sitting
// moved to the benchmark log, cannot leave links behind).
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ".md" {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchorsOf := map[string]map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(string(src)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			page, anchor, _ := strings.Cut(target, "#")
			path := f
			if page != "" {
				path = filepath.Join(filepath.Dir(f), filepath.FromSlash(page))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor == "" || filepath.Ext(path) != ".md" {
				continue
			}
			if anchorsOf[path] == nil {
				dst, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				anchorsOf[path] = headingAnchors(string(dst))
			}
			if !anchorsOf[path][anchor] {
				t.Errorf("%s: link %s: %s has no section #%s", f, target, filepath.ToSlash(path), anchor)
			}
		}
	}
}

package redis_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every key a script of the persistence builds is in the data layout of
// docs/persistence/redis.md, and every key of that table is built by a
// script: the page's layout cannot drift from the code.
func TestPersistenceDocsLayoutMatchesTheScripts(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/persistence/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "## Data layout")
	end := strings.Index(section[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("docs/persistence/redis.md has no \"## Data layout\" section")
	}
	section = section[start : start+1+end]
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`\\{tag\\}(:[a-z]+)").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	used := map[string]bool{}
	files, err := filepath.Glob("persistence*.go")
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`(?:KEYS\[1\]|\btag|\]) \.\. '(:[a-z]+)[:']|(?:\btag|\]) \+ "(:[a-z]+)[:"]`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range key.FindAllStringSubmatch(string(src), -1) {
			used[m[1]+m[2]] = true
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d key kinds in the scripts: %v; the pattern of this test no longer matches them", len(used), used)
	}
	for k := range used {
		if !documented[k] {
			t.Errorf("the scripts use keys {tag}%s…, which the data layout of docs/persistence/redis.md does not show", k)
		}
	}
	for k := range documented {
		if !used[k] {
			t.Errorf("docs/persistence/redis.md shows keys {tag}%s…, which no script uses", k)
		}
	}
}

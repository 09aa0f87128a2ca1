package driver_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/postbus/bus/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the docs' code blocks that differ from the code")

const transportGuide = "../docs/guide/writing-a-transport.md"

// The guide shows the example transport's Receive as it is in the code.
func TestGuideShowsTheExampleReceive(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_transport_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func (t *chanTransport) Receive(")
	if start < 0 {
		t.Fatal("example_transport_test.go: no Receive method")
	}
	end := strings.Index(s[start:], "\n}\n")
	if end < 0 {
		t.Fatal("example_transport_test.go: Receive has no end")
	}
	docblock.Check(t, transportGuide, map[string]string{"example-receive": s[start : start+end+2]}, *update)
}

// Package leakcheck fails a test binary that leaves goroutines of Postbus
// code running after its tests: every package's TestMain calls Main.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests, then waits up to five seconds for goroutines running
// code of the given package path prefixes (default "github.com/postbus/") to
// end, and fails the binary if some remain.
func Main(m *testing.M, prefixes ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := wait(5*time.Second, prefixes); leaked != "" {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func wait(limit time.Duration, prefixes []string) string {
	if len(prefixes) == 0 {
		prefixes = []string{"github.com/postbus/"}
	}
	deadline := time.Now().Add(limit)
	for {
		leaked := leakedStacks(prefixes)
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leakedStacks(prefixes []string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/leakcheck.") {
			continue // this goroutine
		}
		for _, p := range prefixes {
			if strings.Contains(g, p) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}

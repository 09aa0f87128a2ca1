package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func testContext() context.Context { return context.Background() }

// runBench runs the bench with args and returns its result, failing the
// test unless it exited 0 with one JSON line (and a Markdown row).
func runBench(t *testing.T, args ...string) Result {
	t.Helper()
	var stdout, stderr strings.Builder
	args = append(args, "-markdown")
	if code := run(t.Context(), args, strings.NewReader(""), &stdout, &stderr); code != exitOK {
		t.Fatalf("bench %v: exit code %d\nstdout: %s\nstderr: %s", args, code, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "| ") {
		t.Fatalf("bench %v printed %q, want a JSON line and a Markdown row", args, stdout.String())
	}
	var r Result
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("bench %v: %v in %q", args, err, lines[0])
	}
	t.Logf("%s", lines[1]) // the figures, for the reader: no test asserts them
	return r
}

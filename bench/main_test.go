package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// A worker process started by a test with -instances re-executes this
	// test binary: run it as the bench would.
	if len(os.Args) > 1 && os.Args[1] == "-worker" {
		os.Exit(run(testContext(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if err := checkGoroutines(before, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkGoroutines waits until no more goroutines run than before the tests,
// and reports the stacks of the extra ones if they do not end in time.
func checkGoroutines(before int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("goroutine leak: %d running after the tests, %d before:\n%s", n, before, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 0, 1000)
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	want := Percentiles{P50: 500, P90: 900, P99: 990, Max: 1000}
	if *p != want {
		t.Fatalf("percentiles = %+v, want %+v", *p, want)
	}
	if percentiles(nil) != nil {
		t.Fatal("percentiles(nil) is not nil")
	}
}

func TestTrackerCounts(t *testing.T) {
	t.Parallel()
	tr := newTracker(10, 4)
	now := time.Now()
	tr.record(10, "a", now, time.Millisecond)
	tr.record(11, "b", now, -time.Millisecond) // early
	tr.record(11, "b", now, time.Millisecond)  // duplicate
	tr.record(12, "x", now, time.Millisecond)
	tr.record(12, "y", now, time.Millisecond) // duplicate with another ID
	tr.record(99, "z", now, time.Millisecond) // not ours
	got := tr.tally()
	if got.Received != 3 || got.Missing != 1 || got.Duplicates != 2 || got.Mismatched != 1 ||
		got.Unexpected != 1 || got.Early != 1 || len(got.Lateness) != 3 {
		t.Fatalf("tally = %+v", got)
	}
	select {
	case <-tr.done:
		t.Fatal("done before every message arrived")
	default:
	}
	tr.record(13, "d", now, 0)
	select {
	case <-tr.done:
	default:
		t.Fatal("not done after every message arrived")
	}
}

func TestResultFailed(t *testing.T) {
	t.Parallel()
	for _, r := range []Result{{Early: 1}, {Duplicates: 1}, {Missing: 1}, {IDMismatches: 1}, {Unexpected: 1}} {
		if !r.Failed() {
			t.Errorf("%+v does not count as failed", r)
		}
	}
	if (&Result{}).Failed() {
		t.Error("a clean result counts as failed")
	}
}

func TestPadding(t *testing.T) {
	t.Parallel()
	s := &stage{pad: padding(1024)}
	if got := s.bodyBytes(12345); got != 1024 {
		t.Fatalf("body of a 1 KiB Tick is %d bytes", got)
	}
	if padding(5) != "" {
		t.Fatal("tiny bodies get padding")
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-workload", "nope"},
		{"-persistence", "nope"},
		{"-transport", "nope"},
		{"-workload", "spread", "-instances", "2"}, // memory is not shared across processes
		{"-workload", "schedule", "-instances", "2"},
		{"-senders", "0"},
		{"-rate", "-1"},
		{"-workload", "backlog", "-backlog-batch", "-1"},
		{"stray"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), args, strings.NewReader(""), &stdout, &stderr); code != exitError {
			t.Errorf("%v: exit code %d, want %d (stderr %q)", args, code, exitError, stderr.String())
		}
	}
}

func TestMarkdownHeader(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"-markdown-header"}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "| workload |") {
		t.Fatalf("header = %q", stdout.String())
	}
}

package main

import (
	"strings"
	"testing"
)

// TestThroughputOutbox runs the PostgreSQL throughput handler (one INSERT
// and one published event per message) with and without -outbox, and
// asserts outcomes only: every message handled once, one business row
// each, every event received once. Each run has its own schema
// (bench_<random run ID>), dropped at the end.
func TestThroughputOutbox(t *testing.T) {
	t.Parallel()
	pg := postgresURL(t)
	for _, c := range []struct {
		name   string
		outbox bool
	}{{"outbox", true}, {"autocommit", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"-workload", "throughput", "-persistence", "postgres", "-postgres-url", pg, "-n", "500"}
			if c.outbox {
				args = append(args, "-outbox")
			}
			r := runBench(t, args...)
			if r.Failed() || r.N != 500 || r.Missing != 0 || r.Duplicates != 0 {
				t.Fatalf("messages lost or duplicated: %+v", r)
			}
			if r.Outbox != c.outbox || r.BusinessRows == nil || *r.BusinessRows != 500 {
				t.Errorf("outbox %v, business rows %v: want %v and 500", r.Outbox, r.BusinessRows, c.outbox)
			}
			if r.Events != 500 || r.CommitToReceipt == nil {
				t.Errorf("%d events received, want 500, with commit→receipt times: %+v", r.Events, r)
			}
		})
	}
}

// TestOutboxRefusals: -outbox needs PostgreSQL and the throughput workload.
func TestOutboxRefusals(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-workload", "throughput", "-persistence", "memory", "-outbox"},
		{"-workload", "throughput", "-persistence", "sqlite", "-outbox"},
		{"-workload", "burst", "-persistence", "postgres", "-outbox"},
	} {
		var stdout, stderr strings.Builder
		code := run(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), "-outbox") {
			t.Errorf("bench %v: exit %d, stderr %q; want %d and an -outbox error", args, code, stderr.String(), exitError)
		}
	}
}

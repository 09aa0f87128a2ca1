package main

import (
	"testing"
)

func TestWorkloadsMemory(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, r Result)
	}{
		{"schedule", []string{"-workload", "schedule", "-n", "5000"}, func(t *testing.T, r Result) {
			if r.MsgsPerSec <= 0 || r.HeapBytesPerMsg <= 0 {
				t.Errorf("schedule reported no rate or no heap figure: %+v", r)
			}
		}},
		{"burst", []string{"-workload", "burst", "-n", "3000", "-lead", "1s"}, func(t *testing.T, r Result) {
			if r.Lateness == nil || r.MsgsPerSec <= 0 {
				t.Errorf("burst reported no lateness or rate: %+v", r)
			}
		}},
		{"spread", []string{"-workload", "spread", "-n", "500", "-over", "500ms", "-lead", "300ms"}, func(t *testing.T, r Result) {
			if r.Lateness == nil || r.DurationMS < 450 {
				t.Errorf("spread finished before its window: %+v", r)
			}
		}},
		{"backlog", []string{"-workload", "backlog", "-n", "300", "-over", "300ms", "-lead", "300ms", "-backlog", "5000", "-idle", "100ms"}, func(t *testing.T, r Result) {
			if r.Backlog != 5000 || r.BaselineLateness == nil || r.IdleCPUPercent == nil || r.LatenessMoved == nil {
				t.Errorf("backlog figures missing: %+v", r)
			}
		}},
		{"throughput", []string{"-workload", "throughput", "-n", "3000"}, func(t *testing.T, r Result) {
			if r.Latency == nil || r.BodyBytes < 1016 || r.BodyBytes > 1032 || r.Senders != 8 {
				t.Errorf("throughput figures missing, or not 8 senders: %+v", r)
			}
		}},
		{"throughput-senders", []string{"-workload", "throughput", "-n", "3000", "-senders", "32"}, func(t *testing.T, r Result) {
			if r.Latency == nil || r.Senders != 32 {
				t.Errorf("throughput with -senders 32 reported %d senders: %+v", r.Senders, r)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runBench(t, c.args...)
			if r.Failed() || r.N == 0 {
				t.Fatalf("run failed: %+v", r)
			}
			c.check(t, r)
		})
	}
}

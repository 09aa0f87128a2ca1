package main

import (
	"testing"
)

// The bench tests assert outcomes only: every message delivered once, none
// early, no error, and the report's shape. Rates, heap and CPU figures are
// logged, never asserted: they move with the machine's load. Lead times
// (from the start of scheduling to the first due time) are many times what
// scheduling takes on an idle machine, so a loaded one does not overrun
// them.

func TestWorkloadsMemory(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, r Result)
	}{
		{"schedule", []string{"-workload", "schedule", "-n", "5000"}, func(t *testing.T, r Result) {
			// Due in an hour: the run stores them all and nothing arrives
			// (a receipt would count as unexpected, failing the run).
			if r.N != 5000 {
				t.Errorf("scheduled %d messages, want 5000", r.N)
			}
		}},
		{"schedule-batch", []string{"-workload", "schedule-batch", "-n", "5000", "-lead", "500ms"}, func(t *testing.T, r Result) {
			// One call of 5,000 messages, then each delivered once (the
			// run fails on a missing or early one).
			if r.N != 5000 || r.MsgsPerSec <= 0 || r.Note != "one SendBatch call" {
				t.Errorf("schedule-batch report incomplete: %+v", r)
			}
		}},
		{"burst", []string{"-workload", "burst", "-n", "3000", "-lead", "3s"}, func(t *testing.T, r Result) {
			if r.Lateness == nil {
				t.Errorf("burst measured no receipt: %+v", r)
			}
		}},
		{"spread", []string{"-workload", "spread", "-n", "500", "-over", "500ms", "-lead", "2s"}, func(t *testing.T, r Result) {
			// The last message is due 499 ms after the first: a run that
			// ends sooner delivered it early.
			if r.Lateness == nil || r.DurationMS < 450 {
				t.Errorf("spread finished before its window: %+v", r)
			}
		}},
		{"backlog", []string{"-workload", "backlog", "-n", "300", "-over", "300ms", "-lead", "2s", "-backlog", "5000", "-idle", "100ms"}, func(t *testing.T, r Result) {
			if r.Backlog != 5000 || r.BaselineLateness == nil || r.IdleCPUPercent == nil || r.LatenessMoved == nil {
				t.Errorf("backlog report incomplete: %+v", r)
			}
		}},
		{"backlog-batch", []string{"-workload", "backlog", "-n", "300", "-over", "300ms", "-lead", "2s", "-backlog", "5000", "-backlog-batch", "2000", "-idle", "100ms"}, func(t *testing.T, r Result) {
			if r.Backlog != 5000 || r.BacklogMsgsPerSec <= 0 || r.LatenessMoved == nil {
				t.Errorf("backlog stored in batches: report incomplete: %+v", r)
			}
		}},
		{"throughput", []string{"-workload", "throughput", "-n", "3000"}, func(t *testing.T, r Result) {
			if r.Latency == nil || r.BodyBytes < 1016 || r.BodyBytes > 1032 || r.Senders != 8 {
				t.Errorf("throughput report incomplete, or not 1 KiB bodies from 8 senders: %+v", r)
			}
		}},
		{"throughput-rate", []string{"-workload", "throughput", "-n", "400", "-rate", "1000"}, func(t *testing.T, r Result) {
			// 400 messages paced to 1,000 a second cannot finish in much
			// under 400 ms.
			if r.Latency == nil || r.DurationMS < 350 {
				t.Errorf("throughput with -rate 1000 was not paced: %+v", r)
			}
		}},
		{"throughput-senders", []string{"-workload", "throughput", "-n", "3000", "-senders", "32"}, func(t *testing.T, r Result) {
			if r.Latency == nil || r.Senders != 32 {
				t.Errorf("throughput with -senders 32 reported %d senders: %+v", r.Senders, r)
			}
		}},
		{"runtime-recurring", []string{"-workload", "runtime-recurring", "-n", "200", "-tick-every", "2s", "-tick-for", "4s", "-idle", "200ms"}, func(t *testing.T, r Result) {
			// 200 schedules of 2s over a window of two intervals: 400
			// ticks, each once (Failed checks none missing, doubled or
			// early; the count checks the window held them all).
			if ticks := r.TicksDuePerSec * r.DurationMS / 1000; r.DurationMS != 4000 || ticks != 400 {
				t.Errorf("measured %.0f ticks due over %.0f ms, want 400 over 4000 ms: %+v", ticks, r.DurationMS, r)
			}
			if r.Lateness == nil || r.BaselineMessages != 400 || r.BaselineLateness == nil || r.CreatePerSec <= 0 ||
				len(r.RuntimeIdle) != 2 || r.RuntimeIdle[0].Schedules != 2 || r.RuntimeIdle[1].Schedules != 200 || r.ListLatency == nil {
				t.Errorf("runtime-recurring report incomplete: %+v", r)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runBench(t, c.args...)
			if r.Failed() || r.N == 0 {
				t.Fatalf("messages lost, duplicated or early: %+v", r)
			}
			c.check(t, r)
		})
	}
}

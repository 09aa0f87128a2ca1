package main

import "testing"

// TestKafka runs a small throughput and burst on the in-process kfake
// cluster the kafka driver starts when no -kafka-seeds are given.
func TestKafka(t *testing.T) {
	t.Parallel()
	r := runBench(t, "-workload", "throughput", "-transport", "kafka", "-n", "1000")
	if r.Failed() || r.Latency == nil {
		t.Fatalf("throughput run failed: %+v", r)
	}
	r = runBench(t, "-workload", "burst", "-transport", "kafka", "-n", "1000", "-lead", "3s")
	if r.Failed() {
		t.Fatalf("burst run failed: %+v", r)
	}
}

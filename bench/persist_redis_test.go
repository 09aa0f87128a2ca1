package main

import (
	"errors"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/postbus/bus/bustest"
)

// redisReachable skips the test when nothing listens at the bench's Redis,
// except under CI=true, where it fails.
func redisReachable(t *testing.T) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", redisAddr(), 2*time.Second)
	if err != nil {
		bustest.SkipOutsideCI(t, "Redis is not reachable at %s (set POSTBUS_BENCH_REDIS_ADDR): %v", redisAddr(), err)
	}
	_ = conn.Close()
}

func TestRedisPersistence(t *testing.T) {
	t.Parallel()
	redisReachable(t)
	for name, args := range map[string][]string{
		"burst":                   {"-workload", "burst", "-n", "1000", "-lead", "10s"},
		"spread across processes": {"-workload", "spread", "-instances", "2", "-n", "400", "-over", "500ms", "-lead", "10s"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runBench(t, append(args, "-persistence", "redis")...)
			if r.Failed() || r.N == 0 {
				t.Fatalf("messages lost, duplicated or early: %+v", r)
			}
			if len(r.NodeCPUMSPer1k) != 1 {
				t.Errorf("server CPU per node = %v, want the one Redis server's", r.NodeCPUMSPer1k)
			}
		})
	}
}

func TestRedisClusterPersistence(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			bustest.SkipOutsideCI(t, "-persistence redis-cluster needs redis-server: %v", err)
		}
		t.Fatal(err)
	}
	for _, masters := range []string{"1", "3"} {
		t.Run(masters+" masters", func(t *testing.T) {
			t.Parallel()
			r := runBench(t, "-workload", "burst", "-n", "1000", "-lead", "10s", "-persistence", "redis-cluster", "-redis-masters", masters)
			if r.Failed() || r.N == 0 {
				t.Fatalf("messages lost, duplicated or early: %+v", r)
			}
			if want := int(masters[0] - '0'); len(r.NodeCPUMSPer1k) != want {
				t.Errorf("server CPU per node = %v, want %d nodes", r.NodeCPUMSPer1k, want)
			}
		})
	}
	t.Run("backlog", func(t *testing.T) {
		t.Parallel()
		// The idle cost counts the cluster's own node, not every
		// redis-server of the machine.
		r := runBench(t, "-workload", "backlog", "-n", "300", "-over", "300ms", "-lead", "5s", "-backlog", "5000",
			"-backlog-batch", "1000", "-idle", "200ms", "-persistence", "redis-cluster", "-redis-masters", "1")
		if r.Failed() || r.N == 0 {
			t.Fatalf("messages lost, duplicated or early: %+v", r)
		}
		if r.ServerIdleCPUPct == nil || len(r.NodeCPUMSPer1k) != 1 {
			t.Errorf("backlog on redis-cluster measured no server idle CPU or per-node CPU: %+v", r)
		}
	})
}

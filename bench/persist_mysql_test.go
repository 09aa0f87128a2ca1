package main

import (
	"net"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus/bustest"
)

// mysqlReachable skips the test when nothing listens at the bench's MySQL
// DSN, except under CI=true, where it fails.
func mysqlReachable(t *testing.T) {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(mysqlDSN())
	if err != nil {
		t.Fatalf("%s: %v", mysqlDSNEnv, err)
	}
	conn, err := net.DialTimeout("tcp", cfg.Addr, 2*time.Second)
	if err != nil {
		bustest.SkipOutsideCI(t, "MariaDB/MySQL is not reachable at %s (set %s): %v", cfg.Addr, mysqlDSNEnv, err)
	}
	_ = conn.Close()
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	mysqlReachable(t)
	for name, args := range map[string][]string{
		"burst":                   {"-workload", "burst", "-n", "1000", "-lead", "10s"},
		"spread across processes": {"-workload", "spread", "-instances", "2", "-n", "400", "-over", "500ms", "-lead", "10s"},
		"burst across processes":  {"-workload", "burst", "-instances", "2", "-n", "1000", "-lead", "10s"},
		"schedule":                {"-workload", "schedule", "-n", "1000"},
		"schedule-batch":          {"-workload", "schedule-batch", "-n", "1000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runBench(t, append(args, "-persistence", "mysql")...)
			if r.Failed() {
				t.Fatalf("run failed: %+v", r)
			}
			if r.Instances != 0 && r.Instances != 2 {
				t.Errorf("instances = %d", r.Instances)
			}
			// The delayed workloads claim and delete rows: redo log written.
			if delayed := args[1] == "burst" || args[1] == "spread"; delayed && (r.LogBytesPerMsg == nil || *r.LogBytesPerMsg < 50) {
				t.Errorf("redo bytes per message = %v, want the redo the drain wrote", r.LogBytesPerMsg)
			}
		})
	}
}

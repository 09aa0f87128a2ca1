package main

import (
	"bufio"
	"cmp"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus/bustest"
)

// serviceURL returns the URL of a local service for the tests, from the
// environment variable env or the loopback default. It skips the test when
// nothing listens there, except under CI=true, where it fails.
func serviceURL(t *testing.T, name, env, fallback string) string {
	t.Helper()
	raw := cmp.Or(os.Getenv(env), fallback)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		bustest.SkipOutsideCI(t, "%s is not reachable at %s (set %s): %v", name, u.Host, env, err)
	}
	_ = conn.Close()
	return raw
}

func postgresURL(t *testing.T) string {
	return serviceURL(t, "PostgreSQL", "POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
}

func TestSQLiteAcrossProcesses(t *testing.T) {
	t.Parallel()
	r := runBench(t, "-workload", "spread", "-persistence", "sqlite", "-instances", "2",
		"-n", "200", "-over", "500ms", "-lead", "10s")
	if r.Failed() || r.Instances != 2 || r.Lateness == nil {
		t.Fatalf("run failed: %+v", r)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := postgresURL(t)
	t.Run("burst", func(t *testing.T) {
		t.Parallel()
		r := runBench(t, "-workload", "burst", "-persistence", "postgres", "-postgres-url", pg, "-n", "1000", "-lead", "5s")
		if r.Failed() || r.Lateness == nil {
			t.Fatalf("run failed: %+v", r)
		}
		// Claiming and deleting 1,000 rows writes WAL: well over 0 a message.
		if r.LogBytesPerMsg == nil || *r.LogBytesPerMsg < 50 {
			t.Errorf("WAL bytes per message = %v, want the WAL the drain wrote", r.LogBytesPerMsg)
		}
		// The run's own records (pg_walinspect) are part of the server's.
		if r.RunLogBytesPerMsg == nil || *r.RunLogBytesPerMsg < 50 || *r.RunLogBytesPerMsg > *r.LogBytesPerMsg {
			t.Errorf("the run's own WAL bytes per message = %v (the server's %v), want the WAL the drain wrote", r.RunLogBytesPerMsg, r.LogBytesPerMsg)
		} else if r.RunLogFPIBytesPerMsg == nil || *r.RunLogFPIBytesPerMsg > *r.RunLogBytesPerMsg {
			t.Errorf("full-page images %v of the run's own WAL %v", r.RunLogFPIBytesPerMsg, *r.RunLogBytesPerMsg)
		}
		if r.SessionCPUMS == nil {
			t.Errorf("no session CPU: %+v", r)
		}
	})
	t.Run("spread across processes", func(t *testing.T) {
		t.Parallel()
		r := runBench(t, "-workload", "spread", "-persistence", "postgres", "-postgres-url", pg, "-instances", "2",
			"-n", "400", "-over", "500ms", "-lead", "5s")
		if r.Failed() || r.Instances != 2 {
			t.Fatalf("run failed: %+v", r)
		}
		if r.StoreScansPer1k == nil {
			t.Errorf("no store scan count: %+v", r)
		}
	})
	t.Run("backlog", func(t *testing.T) {
		t.Parallel()
		r := runBench(t, "-workload", "backlog", "-persistence", "postgres", "-postgres-url", pg,
			"-n", "200", "-over", "300ms", "-lead", "5s", "-backlog", "2000", "-idle", "300ms")
		if r.Failed() || r.ServerIdleQueriesPS == nil {
			t.Fatalf("run failed or no idle query count: %+v", r)
		}
	})
	t.Run("runtime-recurring", func(t *testing.T) {
		t.Parallel()
		r := runBench(t, "-workload", "runtime-recurring", "-persistence", "postgres", "-postgres-url", pg,
			"-n", "200", "-tick-every", "2s", "-tick-for", "4s", "-idle", "300ms")
		if ticks := r.TicksDuePerSec * r.DurationMS / 1000; r.Failed() || ticks != 400 {
			t.Fatalf("run failed or measured %.0f ticks, want 400: %+v", ticks, r)
		}
		if r.SessionCPUPerTickUS == nil || r.BaselineSessionCPUPerMsgUS == nil || len(r.RuntimeIdle) != 2 || r.RuntimeIdle[1].QueriesPS == nil {
			t.Errorf("no session CPU or idle scan count: %+v", r)
		}
	})
}

func TestBrokers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, transport, flag, env, fallback string }{
		{"RabbitMQ", "rabbitmq", "-rabbitmq-url", "POSTBUS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"},
		{"NATS", "nats", "-nats-url", "POSTBUS_TEST_NATS_URL", "nats://127.0.0.1:4222"},
		{"PostgreSQL", "postgres", "-postgres-url", "POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			u := serviceURL(t, c.name, c.env, c.fallback)
			r := runBench(t, "-workload", "throughput", "-transport", c.transport, c.flag, u, "-n", "1000")
			if r.Failed() || r.Latency == nil {
				t.Fatalf("throughput run failed: %+v", r)
			}
			r = runBench(t, "-workload", "burst", "-transport", c.transport, c.flag, u, "-n", "1000", "-lead", "3s")
			if r.Failed() {
				t.Fatalf("burst run failed: %+v", r)
			}
		})
	}
}

// TestMongoDB runs a small burst on MongoDB: the server that
// POSTBUS_TEST_MONGODB_URI names, or else the mongodb module's FerretDB test
// server, built and started here on the local PostgreSQL (no MongoDB server
// is packaged for this machine).
func TestMongoDB(t *testing.T) {
	t.Parallel()
	uri := os.Getenv("POSTBUS_TEST_MONGODB_URI")
	if uri == "" {
		uri = startFerretDB(t, postgresURL(t)) // FerretDB keeps its data there
	}
	r := runBench(t, "-workload", "burst", "-persistence", "mongodb", "-mongodb-uri", uri, "-n", "300", "-lead", "10s")
	if r.Failed() {
		t.Fatalf("run failed: %+v", r)
	}
}

// startFerretDB builds ../mongodb/testserver (its own module, outside the
// workspace) and runs it on a free loopback port with a database of its own
// (a random name) on the PostgreSQL server at pgURL, dropped when the server
// exits at the end of the test. It returns the server's MongoDB URI.
func startFerretDB(t *testing.T, pgURL string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ferretdb-testserver")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "mongodb", "testserver")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the FerretDB test server: %v\n%s", err, out)
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postbus_bench_ferretdb_" + newRunID()
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-handler", "postgresql",
		"-postgresql-url", u.String(), "-own-database")
	stdin, err := cmd.StdinPipe() // the server exits when its stdin closes
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		for sc.Scan() {
		}
	}()
	select {
	case uri, ok := <-first:
		if !ok || !strings.HasPrefix(uri, "mongodb://") {
			t.Fatalf("FerretDB test server printed %q, want its URI", uri)
		}
		return uri
	case <-time.After(2 * time.Minute):
		t.Fatal("FerretDB test server did not start within 2 minutes")
	}
	return ""
}

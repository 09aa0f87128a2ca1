package e2e_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/bustest"
)

// outboxSoak runs the -outbox soak, shortened (600 messages over 5 s,
// delays up to 3 s, one fault of each kind, leases of 5 s and a grace of 6
// s after the last due time and fault, then as long as messages or effects
// are missing), on transport and checks that every message was handled,
// none early, every duplicate handling explained, and each message left
// exactly one business row and one event row.
func outboxSoak(t *testing.T, transport string) {
	bin := soakBinary(t)
	cmd := exec.CommandContext(ctxT(t, 3*time.Minute), bin, "-transport", transport, "-outbox",
		"-n", "600", "-duration", "5s", "-max-delay", "3s", "-kills", "1", "-stops", "1", "-terminations", "1", "-cuts", "1",
		"-lease", "5s", "-grace", "6s", "-wait", "30s")
	cmd.Env = append(cmd.Environ(), "POSTBUS_TEST_POSTGRES_URL="+postgresURL(), "POSTBUS_TEST_REDIS_ADDR="+redisAddr())
	out, err := cmd.Output()
	report := string(out)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, report)
	}
	for _, want := range []string{
		"sent 600 ", "\nlost 0\n", "\nearly 0\n", " 0 unexplained)",
		"business rows missing 0, more than one 0; event rows missing 0, more than one 0 (0 extra rows); rows of unknown messages 0",
	} {
		if !strings.Contains(report, want) {
			t.Fatalf("report lacks %q:\n%s", want, report)
		}
	}
	if !regexp.MustCompile(`kill worker \d`).MatchString(report) {
		t.Fatalf("no worker was killed:\n%s", report)
	}
	t.Log(report)
}

// Three worker processes on the PostgreSQL transport with the outbox, each
// Work handler inserting a business row and publishing an event that an
// audit endpoint records, while a worker is killed, one stopped, their
// backends terminated and their database connections cut: every message
// leaves exactly one row of each, none lost (the -outbox soak, shortened).
//
// Not parallel: its three workers hold up to 30 PostgreSQL connections, so
// it runs before the package's parallel tests, not beside them.
func TestOutboxSoakPostgresTransportEffectsExactlyOnce(t *testing.T) {
	pool := newPool(t, 2) // skips or fails when PostgreSQL is not there
	pool.Close()
	outboxSoak(t, "postgres")
}

// The same on Redis Streams, whose connections are cut too. Not parallel
// either.
func TestOutboxSoakRedisEffectsExactlyOnce(t *testing.T) {
	pool := newPool(t, 2)
	pool.Close()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr(), DialTimeout: 3 * time.Second})
	err := rdb.Ping(ctxT(t, 5*time.Second)).Err()
	_ = rdb.Close()
	if err != nil {
		bustest.SkipOutsideCI(t, "Redis not reachable at %s (set POSTBUS_TEST_REDIS_ADDR): %v", redisAddr(), err)
	}
	outboxSoak(t, "redis")
}

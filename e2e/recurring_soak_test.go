package e2e_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Three worker processes declare 50 schedules of a second on one
// PostgreSQL store and deliver them through RabbitMQ for 15 s, while one
// worker is SIGKILLed and started again every 5 s (a lease of 5 s brings
// back what a killed worker held), and the soak sets 10 schedules at
// runtime, replaces 5 and deletes 4: every tick of every schedule and
// live definition in the run arrives, none before its tick, none of a
// definition after it was replaced or deleted, and no tick is handled
// twice but for a kill (the soak's recurring workload, shortened).
func TestRecurringSoakThreeProcessesKillEveryTickOnce(t *testing.T) {
	pool := newPool(t, 2) // skips or fails when PostgreSQL is not there
	pool.Close()
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		unavailable(t, "RabbitMQ", rabbitURL(), err)
	}
	_ = conn.Close()
	bin := soakBinary(t)
	cmd := exec.CommandContext(ctxT(t, 2*time.Minute), bin, "-workload", "recurring", "-transport", "rabbitmq",
		"-schedules", "50", "-runtime", "10", "-duration", "15s", "-kill-every", "5s", "-lease", "5s", "-grace", "10s")
	cmd.Env = append(cmd.Environ(), "POSTBUS_TEST_POSTGRES_URL="+postgresURL(), "POSTBUS_TEST_RABBITMQ_URL="+rabbitURL())
	out, err := cmd.Output()
	report := string(out)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, report)
	}
	m := regexp.MustCompile(`ticks expected (\d+), delivered (\d+), lost 0, duplicates \d+ \(\d+ explained by a kill\), early 0`).FindStringSubmatch(report)
	if m == nil || m[1] != m[2] || !strings.Contains(report, "PASS") || !regexp.MustCompile(`kills [1-9]`).MatchString(report) {
		t.Fatalf("want every expected tick delivered, none lost or early, after at least one kill:\n%s", report)
	}
	if m[1] != "750" { // 50 schedules, 15 ticks each
		t.Errorf("%s ticks expected, want 750:\n%s", m[1], report)
	}
	rt := regexp.MustCompile(`runtime schedules: 15 definitions; ticks expected (\d+), delivered (\d+), lost 0; after a replace or delete 0`).FindStringSubmatch(report)
	if rt == nil || rt[1] != rt[2] || rt[1] == "0" {
		t.Errorf("want every tick of the 15 runtime definitions (10 set, 5 replaced) once, none after a replace or delete:\n%s", report)
	}
	t.Log(report)
}

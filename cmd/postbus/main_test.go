package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/postbus/bus"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// base is the fixture's reference time; the app's clock stands before it,
// so no fixture row is overdue on any store's clock.
var base = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return base.Add(-24 * time.Hour) }

// seed stores the fixture: five scheduled rows of two types, and failures
// of two groups, with fixed IDs and times.
func seed(t *testing.T, s interface {
	bus.ScheduledStore
	bus.FailedStore
}) {
	t.Helper()
	ctx := context.Background()
	var rows []bus.OutgoingMessage
	for i := range 5 {
		typ := "orders.PaymentOverdue"
		if i%2 == 1 {
			typ = "orders.Reminder"
		}
		id := fmt.Sprintf("0190f5d6-0000-7000-8000-00000000000%d", i)
		due := base.Add(time.Duration(i) * time.Hour)
		env := &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(fmt.Sprintf(`{"order":"o-%d"}`, i)),
			ContentType: "application/json", Source: "sales", Destination: "billing", DueAt: due,
			SentAt: base.Add(-time.Hour), Headers: map[string]string{"tenant": "acme"}}
		rows = append(rows, bus.OutgoingMessage{ID: id, Type: typ, Kind: bus.KindCommand, DueAt: due, Envelope: bus.MarshalEnvelope(env)})
	}
	if err := s.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var failed []bus.FailedMessage
	add := func(id, typ, reason string, at time.Time) {
		env := &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(`{"card":"4242"}`), ContentType: "application/json",
			Destination: "billing", SentAt: at.Add(-time.Minute), Headers: map[string]string{
				bus.HeaderFailureReason: reason, bus.HeaderFailureEndpoint: "billing", bus.HeaderFailureQueue: "billing",
				bus.HeaderFailureKind: "handler", bus.HeaderFailureAttempts: "5", bus.HeaderFailureTime: at.Format(time.RFC3339Nano)}}
		failed = append(failed, bus.FailedFromEnvelope(env, at))
	}
	for i := range 4 {
		add(fmt.Sprintf("0190f5d6-0000-7000-9000-00000000000%d", i), "billing.ChargeCard",
			fmt.Sprintf("card %d declined", 1000+i), base.Add(-time.Duration(10-i)*time.Minute))
	}
	add("0190f5d6-0000-7000-9000-000000000009", "billing.Refund", "timeout after 30s", base.Add(-time.Hour))
	if err := s.StoreFailed(ctx, failed); err != nil {
		t.Fatal(err)
	}
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func runApp(t *testing.T, open opener, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, now: fixedNow, open: open}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := a.run(ctx, args)
	return result{code, out.String(), errb.String()}
}

// memoryOpener serves a memory persistence and transport.
func memoryOpener(p *bus.MemoryPersistence, tr bus.Transport) opener {
	return func(_ context.Context, _ settings, n need) (*backends, error) {
		b := &backends{Persistence: p, Scheduled: p, Failed: p, Recurring: p, PersistenceName: "memory"}
		if n.transport {
			b.Transport, b.TransportName = tr, "memory"
		}
		return b, nil
	}
}

// golden compares got with testdata/<name>.golden, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: output differs from %s\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// goldenCases are the read-only commands whose output is fixed for the
// fixture on every store.
var goldenCases = []struct {
	name string
	args []string
}{
	{"scheduled_ls", []string{"scheduled", "ls"}},
	{"scheduled_ls_type", []string{"scheduled", "ls", "--type", "orders.Reminder"}},
	{"scheduled_ls_page", []string{"scheduled", "ls", "--limit", "2"}},
	{"scheduled_ls_json", []string{"scheduled", "ls", "--limit", "2", "--json"}},
	{"scheduled_show", []string{"scheduled", "show", "0190f5d6-0000-7000-8000-000000000001"}},
	{"scheduled_show_json", []string{"scheduled", "show", "--json", "0190f5d6-0000-7000-8000-000000000002"}},
	{"failed_ls", []string{"failed", "ls"}},
	{"failed_ls_type", []string{"failed", "ls", "--type", "billing.Refund"}},
	{"failed_groups", []string{"failed", "groups"}},
	{"failed_groups_json", []string{"failed", "groups", "--json"}},
	{"failed_show", []string{"failed", "show", "0190f5d6-0000-7000-9000-000000000002"}},
	{"failed_retry_dry", []string{"failed", "retry", "--dry-run", "--type", "billing.ChargeCard", "--all"}},
	{"failed_delete_dry_json", []string{"failed", "delete", "--dry-run", "--json", "--group", bus.FailureGroup("billing.Refund", "billing", "timeout after 30s")}},
	{"scheduled_cancel_dry", []string{"scheduled", "cancel", "--dry-run", "0190f5d6-0000-7000-8000-000000000003", "missing-id"}},
}

func TestGoldenMemory(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	seed(t, p)
	open := memoryOpener(p, bus.NewMemoryTransport())
	checkGolden(t, open, nil, p)
}

// checkGolden runs every golden case against the store p, opened by open
// with env, compares each output with its golden file, and checks the dry
// runs changed nothing in p.
func checkGolden(t *testing.T, open opener, env map[string]string, p interface {
	bus.ScheduledBrowser
	bus.FailedStore
}) {
	t.Helper()
	for _, c := range goldenCases {
		r := runApp(t, open, env, c.args...)
		if r.code != exitOK {
			t.Errorf("%s: exit %d, stderr %s", c.name, r.code, r.stderr)
		}
		golden(t, c.name, r.stdout)
	}
	assertUnchanged(t, p, p)
}

// assertUnchanged checks the dry runs changed nothing.
func assertUnchanged(t *testing.T, s bus.ScheduledBrowser, f bus.FailedStore) {
	t.Helper()
	ctx := context.Background()
	if n, err := f.CountFailed(ctx, bus.FailedQuery{}); err != nil || n != 5 {
		t.Errorf("failed messages after dry runs: %d, %v; want 5", n, err)
	}
	rows, err := s.ListScheduled(ctx, bus.ScheduledQuery{})
	if err != nil || len(rows) != 5 {
		t.Errorf("scheduled rows after dry runs: %d, %v; want 5", len(rows), err)
	}
}

func TestUsageAndHelp(t *testing.T) {
	t.Parallel()
	open := memoryOpener(bus.NewMemoryPersistence(), nil)
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "Usage:"},
		{[]string{"help"}, exitOK, "Examples:"},
		{[]string{"--help"}, exitOK, "POSTBUS_POSTGRES_URL"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"scheduled"}, exitUsage, "name a subcommand"},
		{[]string{"scheduled", "ls", "--help"}, exitOK, "--due-before"},
		{[]string{"help", "failed"}, exitOK, "retry"},
		{[]string{"failed", "retry", "--help"}, exitOK, "Examples:"},
		{[]string{"scheduled", "ls", "--limit", "0"}, exitUsage, "--limit"},
		{[]string{"scheduled", "ls", "--nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"scheduled", "ls", "--due-before", "tomorrow"}, exitUsage, "RFC 3339"},
		{[]string{"scheduled", "show"}, exitUsage, "one message ID"},
		{[]string{"scheduled", "show", "missing"}, exitError, "no scheduled message missing"},
		{[]string{"scheduled", "cancel", "missing"}, exitError, "cancelled 0 of 1"},
		{[]string{"failed", "retry"}, exitUsage, "name messages"},
		{[]string{"failed", "delete", "id1", "--group", "g"}, exitUsage, "not both"},
		{[]string{"failed", "show", "missing"}, exitError, "no failed message"},
		{[]string{"provision"}, exitUsage, "--endpoint is required"},
		{[]string{"provision", "--endpoint", "billing", "--dry-run"}, exitUsage, "give a transport"},
	}
	for _, c := range cases {
		r := runApp(t, open, nil, c.args...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.want) {
			t.Errorf("postbus %v: exit %d (want %d), output lacks %q:\n%s%s", c.args, r.code, c.code, c.want, r.stdout, r.stderr)
		}
	}
}

func TestNoPersistenceNamed(t *testing.T) {
	t.Parallel()
	r := runApp(t, openBackends, nil, "scheduled", "ls")
	if r.code != exitUsage || !strings.Contains(r.stderr, "POSTBUS_POSTGRES_URL") {
		t.Errorf("exit %d, stderr %s", r.code, r.stderr)
	}
	for _, env := range []map[string]string{
		{"POSTBUS_POSTGRES_URL": "postgres://x", "POSTBUS_SQLITE_PATH": "/tmp/x"},
		{"POSTBUS_MYSQL_URL": "root@tcp(127.0.0.1:1)/x", "POSTBUS_SQLITE_PATH": "/tmp/x"},
	} {
		r = runApp(t, openBackends, env, "failed", "ls")
		if r.code != exitUsage || !strings.Contains(r.stderr, "not several") {
			t.Errorf("two persistences %v: exit %d, stderr %s", env, r.code, r.stderr)
		}
	}
}

func TestProvisionDryRun(t *testing.T) {
	t.Parallel()
	env := map[string]string{"POSTBUS_RABBITMQ_URL": "amqp://guest:guest@127.0.0.1:1/", "POSTBUS_POSTGRES_URL": "postgres://x@127.0.0.1:1/db", "POSTBUS_POSTGRES_SCHEMA": "ops"}
	// The dry run connects to nothing: the addresses above are closed ports.
	r := runApp(t, openBackends, env, "provision", "--endpoint", "billing", "--event", "orders.OrderPlaced,orders.OrderCancelled", "--dry-run")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	golden(t, "provision_dry_rabbitmq_postgres", r.stdout)
	r = runApp(t, openBackends, map[string]string{"POSTBUS_NATS_URL": "nats://127.0.0.1:1", "POSTBUS_SQLITE_PATH": "/nonexistent/app.db"},
		"provision", "--endpoint", "billing", "--event", "orders.OrderPlaced", "--dry-run", "--json")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	golden(t, "provision_dry_nats_sqlite_json", r.stdout)
	if _, err := os.Stat("/nonexistent/app.db"); err == nil {
		t.Error("the dry run created the SQLite file")
	}
}

func TestProvisionMemory(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	open := func(_ context.Context, _ settings, n need) (*backends, error) {
		return &backends{Transport: tr, TransportName: "memory"}, nil
	}
	r := runApp(t, open, map[string]string{"POSTBUS_NATS_URL": "nats://unused"}, "provision", "--endpoint", "billing", "--event", "orders.OrderPlaced")
	if r.code != exitOK || !strings.Contains(r.stdout, "provisioned") {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// TestProvisionRefusesNamesBusNewRefuses: provision, dry run or not, checks
// queue names as bus.New does, before it connects to anything.
func TestProvisionRefusesNamesBusNewRefuses(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	var opened atomic.Int64
	open := func(_ context.Context, _ settings, _ need) (*backends, error) {
		opened.Add(1)
		return &backends{Transport: tr, TransportName: "memory"}, nil
	}
	env := map[string]string{"POSTBUS_RABBITMQ_URL": "amqp://guest:guest@127.0.0.1:1/"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "nc3 bad!"}, "--endpoint"},
		{[]string{"--endpoint", "a.*.b", "--dry-run"}, "--endpoint"},
		{[]string{"--endpoint", "..", "--dry-run"}, "--endpoint"},
		{[]string{"--endpoint", "billing", "--error-queue", "err q"}, "--error-queue"},
		{[]string{"--endpoint", "billing", "--deadletter-queue", "dl/q", "--dry-run"}, "--deadletter-queue"},
		{[]string{"--endpoint", "billing", "--error-queue", "billing", "--dry-run"}, "--error-queue"},
		{[]string{"--send-only", "--error-queue", "bad!"}, "--error-queue"},
	}
	for _, c := range cases {
		r := runApp(t, open, env, append([]string{"provision"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("postbus provision %q: exit %d (want %d), stderr lacks %q:\n%s%s", c.args, r.code, exitUsage, c.want, r.stdout, r.stderr)
		}
	}
	if n := opened.Load(); n != 0 {
		t.Errorf("the transport was opened %d times for invalid names, want 0", n)
	}
	r := runApp(t, open, env, "provision", "--send-only")
	if r.code != exitOK || opened.Load() != 1 {
		t.Errorf("send-only provision without an endpoint: exit %d, opened %d: %s%s", r.code, opened.Load(), r.stdout, r.stderr)
	}
}

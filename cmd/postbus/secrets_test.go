package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus/bustest"
)

// secret is a password no output of the command may show.
const secret = "S3cretPw-XYZ"

// secretURLs are, for each connection setting, URLs that hold the
// password: against the real services (PostgreSQL's trust authentication
// accepts any password; MariaDB, RabbitMQ, Redis and NATS refuse or ignore it),
// on closed ports, and malformed in ways that make a parser quote them.
func secretURLs(t *testing.T) map[string][]string {
	dead := bustest.DeadAddr(t)
	return map[string][]string{
		"postgres-url": {
			"postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=disable",
			"postgres://root:" + secret + "@" + dead + "/test?sslmode=disable&connect_timeout=3",
			"postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=bogus",
			"postgres://root:" + secret + "@127.0.0.1:abc/test",
			"postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=disable&x=%zz",
			"host=127.0.0.1 port=5432 user=root password=" + secret + " dbname=test sslmode=disable",
			"host=127.0.0.1 port=abc user=root password='" + secret + "' dbname=test",
		},
		"mysql-url": {
			"root:" + secret + "@tcp(127.0.0.1:3306)/test?timeout=5s",
			"app:" + secret + "@tcp(" + dead + ")/test?timeout=2s",
			"app:" + secret + "@tcp(127.0.0.1:3306)/test?no-such-param=%zz",
			"app:" + secret + "@tcp(127.0.0.1:3306)test",
		},
		"rabbitmq-url": {
			"amqp://guest:" + secret + "@127.0.0.1:5672/",
			"amqp://guest:" + secret + "@127.0.0.1:abc/",
			"amqps://guest:" + secret + "@127.0.0.1:5672/%zz",
		},
		"redis-url": {
			"redis://:" + secret + "@127.0.0.1:6379/0",
			"redis://u:" + secret + "@" + dead + "/0?dial_timeout=2s",
			"redis://:" + secret + "@127.0.0.1:abc/0",
			"redis://:" + secret + "@127.0.0.1:6379/%zz",
			"redis://:" + secret + "@127.0.0.1:6379/0?bogus=1",
		},
		"nats-url": {
			"nats://u:" + secret + "@127.0.0.1:4222",
			"nats://u:" + secret + "@" + dead,
			"nats://u:" + secret + "@127.0.0.1:abc",
			"nats://u:" + secret + "@127.0.0.1:4222/%zz",
		},
	}
}

// TestPasswordsNeverPrinted runs commands with every connection flag and
// its POSTBUS_* variable set to URLs that hold a password, and checks that
// neither stdout nor stderr shows the password, whether the command
// succeeds or fails.
func TestPasswordsNeverPrinted(t *testing.T) {
	t.Parallel()
	pg := "postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=disable"
	for name, urls := range secretURLs(t) {
		env := "POSTBUS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		for _, u := range urls {
			var cmds [][]string
			switch name {
			case "postgres-url", "mysql-url":
				cmds = [][]string{{"scheduled", "ls"}, {"failed", "groups"}, {"recurring", "ls"}, {"console", "--addr", "256.0.0.1:1"}}
			default: // a transport: with a persistence, for retry and provision
				cmds = [][]string{
					{"failed", "retry", "--all", "--postgres-url", pg},
					{"provision", "--send-only", "--dry-run", "--postgres-url", pg},
				}
				if name == "rabbitmq-url" && strings.Contains(u, ":5672/") { // refused: creates nothing
					ns := bustest.Namespace()
					cmds = append(cmds, []string{"provision", "--send-only", "--error-queue", "secrets-" + ns, "--deadletter-queue", "secrets-dl-" + ns})
				}
			}
			for _, args := range cmds {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					for _, run := range []struct {
						env  map[string]string
						args []string
					}{
						{map[string]string{env: u}, args},
						{nil, append(append([]string{}, args...), "--"+name, u)},
					} {
						r := runApp(t, openBackends, run.env, run.args...)
						if out := r.stdout + r.stderr; strings.Contains(out, secret) {
							t.Errorf("postbus %v (env %v): exit %d, output shows the password:\n%s", run.args, run.env, r.code, out)
						}
					}
				})
			}
		}
	}
}

// The console of "postbus console", on a PostgreSQL URL with a password
// (accepted by trust authentication, or on a closed port) and a RabbitMQ
// URL whose password the broker refuses, shows the password on no page,
// in no redirect after an action, and not in its log.
func TestConsolePasswordNeverShown(t *testing.T) {
	t.Parallel()
	_, env := postgresFixture(t)
	pg, err := url.Parse(env["POSTBUS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	pg.User = url.UserPassword(pg.User.Username(), secret)
	closed := *pg
	closed.Host = bustest.DeadAddr(t)
	for name, pgURL := range map[string]string{"accepted": pg.String(), "closed port": closed.String()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stderr := new(bustest.LogBuffer) // the transport logs from its own goroutines
			a := &app{stdout: io.Discard, stderr: stderr, getenv: func(string) string { return "" }, now: fixedNow, open: openBackends}
			s := settings{PostgresURL: pgURL, PostgresSchema: env["POSTBUS_POSTGRES_SCHEMA"],
				RabbitMQURL: "amqp://guest:" + secret + "@127.0.0.1:5672/", Log: a.logger()}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := openBackends(ctx, s, need{persistence: true, transport: true})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			h, stop, err := a.consoleHandler(b, false)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			cc := newConsoleClient(t, h)
			var shown []string
			for _, path := range []string{"/", "/scheduled", "/scheduled/0190f5d6-0000-7000-8000-000000000001",
				"/failed", "/failed/0190f5d6-0000-7000-9000-000000000001", "/recurring"} {
				code, body := cc.get(path)
				shown = append(shown, fmt.Sprintf("GET %s (%d): %s", path, code, body))
			}
			_, loc := cc.post("/failed/retry", url.Values{"id": {"0190f5d6-0000-7000-9000-000000000001"}})
			shown = append(shown, "the retry's redirect: "+loc, "stderr: "+stderr.String())
			for _, s := range shown {
				if strings.Contains(s, secret) {
					t.Errorf("the password is shown in %s", s)
				}
			}
			if !strings.Contains(strings.Join(shown, "\n"), "error") {
				t.Error("no error shown: the test proves nothing")
			}
		})
	}
}

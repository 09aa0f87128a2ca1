package main

import (
	"strings"
	"testing"

	"github.com/postbus/bus/bustest"
)

// secret is a password no output of the command may show.
const secret = "S3cretPw-XYZ"

// secretURLs are, for each connection setting, URLs that hold the
// password: against the real services (PostgreSQL's trust authentication
// accepts any password; MariaDB, RabbitMQ and NATS refuse or ignore it),
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

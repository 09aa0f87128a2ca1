package main

import (
	"strings"
	"testing"
)

// secret is a password no output of the command may show.
const secret = "S3cretPw-XYZ"

// TestPasswordsNeverPrinted runs commands with URLs that hold a password,
// against the real PostgreSQL (trust authentication accepts any password)
// and against closed ports, and checks that neither stdout nor stderr
// shows the password, whether the command succeeds or fails. (A RabbitMQ
// transport on a closed port retries until the command's context ends;
// the rabbitmq module's tests cover its errors and logs.)
func TestPasswordsNeverPrinted(t *testing.T) {
	t.Parallel()
	pg := "postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=disable"
	closedPG := "postgres://root:" + secret + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=3"
	badPG := "postgres://root:" + secret + "@127.0.0.1:5432/test?sslmode=bogus"
	for _, c := range []struct {
		env  map[string]string
		args []string
	}{
		{map[string]string{"POSTBUS_POSTGRES_URL": pg}, []string{"scheduled", "ls"}},
		{map[string]string{"POSTBUS_POSTGRES_URL": closedPG}, []string{"failed", "ls"}},
		{map[string]string{"POSTBUS_POSTGRES_URL": badPG}, []string{"scheduled", "ls"}},
		{nil, []string{"failed", "ls", "--postgres-url", closedPG}},
		{nil, []string{"provision", "--endpoint", "billing", "--postgres-url", closedPG,
			"--nats-url", "nats://u:" + secret + "@127.0.0.1:1"}},
		{nil, []string{"provision", "--endpoint", "billing", "--dry-run", "--postgres-url", pg,
			"--rabbitmq-url", "amqp://guest:" + secret + "@127.0.0.1:1/"}},
	} {
		r := runApp(t, openBackends, c.env, c.args...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("postbus %v (env %v): exit %d, output shows the password:\n%s%s", c.args, c.env, r.code, r.stdout, r.stderr)
		}
	}
}

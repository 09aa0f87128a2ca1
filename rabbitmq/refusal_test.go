package rabbitmq

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestDialRefusalsAreToldFromOutages(t *testing.T) {
	t.Parallel()
	server := func(code int, reason string) error {
		return fmt.Errorf("rabbitmq: dial: %w", &amqp.Error{Code: code, Reason: reason, Server: true})
	}
	for name, c := range map[string]struct {
		err  error
		want refusal
	}{
		"missing vhost":        {server(amqp.NotAllowed, "NOT_ALLOWED - vhost x not found"), refused},
		"no access to vhost":   {server(amqp.NotAllowed, "NOT_ALLOWED - access to vhost 'x' refused for user 'u'"), refused},
		"login refused":        {server(amqp.AccessRefused, "ACCESS_REFUSED - Login was refused"), refused},
		"no shared mechanism":  {amqp.ErrSASL, refused},
		"socket closed: login": {amqp.ErrCredentials, maybeRefused},
		"socket closed: vhost": {amqp.ErrVhost, maybeRefused},
		"vhost limit":          {server(amqp.NotAllowed, "NOT_ALLOWED - access to vhost 'x' refused for user 'u': connection limit (5) is reached"), notRefused},
		"user limit":           {server(amqp.NotAllowed, "NOT_ALLOWED - Connection refused for user 'u': user connection limit (5) is reached"), notRefused},
		"vhost down":           {server(amqp.NotAllowed, "NOT_ALLOWED - vhost x is down"), notRefused},
		"broker shutting down": {server(amqp.ConnectionForced, "CONNECTION_FORCED - shutdown"), notRefused},
		"client-side 403":      {&amqp.Error{Code: amqp.AccessRefused, Reason: "local"}, notRefused},
		"connection refused":   {errors.New("dial tcp 127.0.0.1:5672: connect: connection refused"), notRefused},
		"eof":                  {io.EOF, notRefused},
	} {
		if got := classifyDial(c.err); got != c.want {
			t.Errorf("%s: classified %d, want %d", name, got, c.want)
		}
	}
}

func TestRefusedErrorHidesThePassword(t *testing.T) {
	t.Parallel()
	err := refusedError("amqp://app:s3cret@broker:5672/sales", fmt.Errorf("rabbitmq: dial: %w", amqp.ErrCredentials))
	msg := err.Error()
	for _, want := range []string{"app", "broker:5672/sales", "username or password not allowed", "403"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("%q shows the password", msg)
	}
	if !errors.Is(err, ErrPermanent) || !errors.Is(err, amqp.ErrCredentials) {
		t.Errorf("%v matches neither ErrPermanent nor the broker's error", err)
	}
}

package rabbitmq

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus/driver"
)

// refusal classifies a failed connection attempt.
type refusal int

const (
	// notRefused: the broker is unreachable, restarting, overloaded or
	// out of connections; trying again can succeed.
	notRefused refusal = iota
	// refused: the broker said why it will not accept the connection.
	refused
	// maybeRefused: the socket closed during the login or the vhost step
	// without a reply, which the AMQP client reports as a refusal (a wrong
	// password on RabbitMQ, which closes the socket without saying why), but
	// which a network failure at that moment also produces. A second
	// attempt in a row that ends the same way confirms it.
	maybeRefused
)

// classifyDial tells whether a failed connection attempt can heal by
// retrying. RabbitMQ refuses a connection with 403 ACCESS_REFUSED (login)
// or 530 NOT_ALLOWED (vhost); 530 also reports a vhost that is down or a
// connection limit that is reached, which heal, so those are not refusals.
func classifyDial(err error) refusal {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return notRefused // network errors, timeouts, TLS handshakes cut short
	}
	switch {
	case ae == amqp.ErrSASL: // no shared authentication mechanism
		return refused
	case ae == amqp.ErrCredentials, ae == amqp.ErrVhost:
		return maybeRefused
	case !ae.Server:
		return notRefused
	case ae.Code == amqp.AccessRefused:
		return refused
	case ae.Code == amqp.NotAllowed:
		reason := strings.ToLower(ae.Reason)
		if strings.Contains(reason, "limit") || strings.Contains(reason, "is down") {
			return notRefused
		}
		return refused
	}
	return notRefused
}

// refusedError returns the *PermanentError for err, a refused connection
// attempt to rawURL: the broker's reason and what to check.
func refusedError(rawURL string, err error) *PermanentError {
	var perm *PermanentError
	if errors.As(err, &perm) {
		return perm // the session's setup was refused on a channel
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return &PermanentError{Err: err} // not reached: classifyDial wants an *amqp.Error
	}
	hint := ""
	switch ae.Code {
	case amqp.AccessRefused:
		hint = " (check the user name and password in the URL)"
	case amqp.NotAllowed:
		hint = " (check that the vhost, the URL's path, exists and that the user may use it)"
	}
	return &PermanentError{Err: fmt.Errorf("connect to %s: %w%s", driver.Redact(rawURL), ae, hint)}
}

// channelRefused wraps a server's channel-level refusal (a missing queue,
// a conflicting declaration, missing permissions) in a *PermanentError, and
// returns any other error unchanged.
func channelRefused(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && isChannelLevel(ae) {
		return &PermanentError{Err: err}
	}
	return err
}

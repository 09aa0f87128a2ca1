package rabbitmq

import (
	"errors"
	"fmt"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("rabbitmq: transport closed")
	// ErrNotConnected is matched by a *NotConnectedError: the call's context
	// ended while the transport was waiting for a broker connection.
	ErrNotConnected = errors.New("rabbitmq: not connected")
	// ErrUnroutable is returned by Send when the broker could route the
	// message to no queue: the destination queue does not exist. The error
	// also matches bus.ErrPermanent, so the dispatcher does not retry a
	// scheduled message to a missing queue for ever.
	ErrUnroutable = errors.New("rabbitmq: message unroutable")
	// ErrTooLarge is returned for a message larger than the broker's
	// max_message_size: the broker closed the channel on it. The error
	// also matches bus.ErrPermanent.
	ErrTooLarge = errors.New("rabbitmq: message larger than the broker's max_message_size")
	// ErrNacked is returned when the broker refused a message with a
	// negative publisher confirm (an internal broker error, or a queue
	// length limit with overflow "reject-publish").
	ErrNacked = errors.New("rabbitmq: message rejected by the broker")
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("rabbitmq: invalid options")
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("rabbitmq: invalid name")
	// ErrPermanent is matched by every *PermanentError: the broker refused
	// the transport in a way that retrying cannot fix.
	ErrPermanent = errors.New("rabbitmq: refused by the broker")
)

// errorFamily makes the kit's typed errors RabbitMQ's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "rabbitmq", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options field or URL: New returns it,
// and nothing is started. Field is "URL" or the Options field, Reason says
// why; it matches ErrInvalidOptions. Every Postbus driver names this error
// the same.
type OptionsError = driver.OptionsError[errorFamily]

// NameError reports a queue, exchange or event type name that RabbitMQ
// cannot use: Provision, Send, Publish and Receive return it (wrapped)
// before contacting the broker. Every Postbus driver names this error the
// same.
type NameError struct {
	What   string // "queue", "event type", ...
	Name   string
	Reason string
}

// Error describes the failure.
func (e *NameError) Error() string {
	return fmt.Sprintf("rabbitmq: invalid %s name %.60q: %s", e.What, e.Name, e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *NameError) Unwrap() error { return ErrInvalidName }

// FieldError reports an envelope field that does not fit its AMQP property
// or header, such as a message ID, type or header key longer than 255
// bytes, or a time outside the years 1-9999. Send and Publish return it
// (wrapped) before anything is sent; it matches bus.ErrInvalidMessage. It
// is about the message, never the configuration: invalid Options are an
// *OptionsError and invalid queue or event type names a *NameError.
type FieldError struct {
	Field  string // the Envelope field, e.g. "ID" or "Headers"
	Reason string
}

// Error describes the failure.
func (e *FieldError) Error() string {
	return fmt.Sprintf("rabbitmq: envelope field %s: %s", e.Field, e.Reason)
}

// Unwrap returns bus.ErrInvalidMessage.
func (e *FieldError) Unwrap() error { return bus.ErrInvalidMessage }

// NotConnectedError is returned when a call's context ends while the
// transport has no broker connection (during an outage, or before the first
// connection succeeded). Nothing was sent. It matches ErrNotConnected, the
// context's error, and the last connection error.
type NotConnectedError struct {
	Err     error // the context's error
	LastErr error // why the last connection attempt failed, or was lost; may be nil
}

// Error describes the failure.
func (e *NotConnectedError) Error() string {
	if e.LastErr == nil {
		return fmt.Sprintf("rabbitmq: not connected to the broker: %v", e.Err)
	}
	return fmt.Sprintf("rabbitmq: not connected to the broker: %v (last connection error: %v)", e.Err, e.LastErr)
}

// Is reports whether target is ErrNotConnected.
func (e *NotConnectedError) Is(target error) bool { return target == ErrNotConnected }

// Unwrap returns the context's error and the last connection error.
func (e *NotConnectedError) Unwrap() []error {
	if e.LastErr == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.LastErr}
}

// PermanentError reports that the broker refused the transport in a way
// that retrying cannot fix: it refused the connection (wrong user name or
// password, a vhost that does not exist or that the user may not use), or
// a channel operation (a queue that does not exist, a declaration that
// conflicts with an existing queue, missing permissions). Err carries the
// broker's reason, usually an *amqp091.Error. It matches ErrPermanent.
type PermanentError struct {
	Err error
}

// Error describes the failure with the broker's reason.
func (e *PermanentError) Error() string {
	return "rabbitmq: refused by the broker: " + e.Err.Error()
}

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Unwrap returns the broker's refusal.
func (e *PermanentError) Unwrap() error { return e.Err }

package sqs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Defaults used for zero Options fields.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultWaitTime          = 20 * time.Second
	// MaxMessageBytes is the SQS and SNS message size limit the transport
	// enforces before sending: the body as sent (after base64 for a body
	// that is not text) plus every message attribute's name, data type and
	// value.
	MaxMessageBytes = 256 * 1024
	// MaxNamePrefix is the longest Options.NamePrefix.
	MaxNamePrefix = 40
)

// Options configure a Transport. Every zero value means the documented
// default, so Options{} is a working configuration.
type Options struct {
	// NamePrefix starts the name of every queue and topic the transport
	// uses, so several environments (say "staging-" and "prod-") can share
	// one AWS account and region. Letters, digits, '-' and '_' only, at most
	// MaxNamePrefix characters. Default "": names are the sanitised queue
	// and message type names (see the package doc).
	NamePrefix string
	// VisibilityTimeout is how long a received message stays hidden from
	// other consumers. Queues Provision creates get it as their
	// VisibilityTimeout attribute, every receive asks for it, and while a
	// handler runs the transport extends it every HeartbeatInterval, so a
	// handler may run longer than it. Whole seconds, 1s to 12h.
	// Default 30s.
	VisibilityTimeout time.Duration
	// HeartbeatInterval is how often the visibility of a message in a
	// running handler is extended. It must be shorter than
	// VisibilityTimeout. Default VisibilityTimeout/3.
	HeartbeatInterval time.Duration
	// WaitTime is the long-polling wait of each ReceiveMessage call. Whole
	// seconds, 1s to 20s. Default 20s (fewest empty receives, so lowest
	// cost).
	WaitTime time.Duration
	// KeepQueuePolicy leaves the queue policy alone in Provision. By
	// default Provision sets the policy of every queue that subscribes to
	// events to one statement allowing the bus's SNS topics (those whose
	// name starts with NamePrefix, in the queue's account and region) to
	// send to it, replacing any policy the queue had. Set it when you
	// manage queue policies yourself (Terraform, CloudFormation).
	KeepQueuePolicy bool
	// Logger receives the transport's logs. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	driver.Default(&o.VisibilityTimeout, DefaultVisibilityTimeout)
	driver.Default(&o.HeartbeatInterval, o.VisibilityTimeout/3)
	driver.Default(&o.WaitTime, DefaultWaitTime)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o Options) validate() error {
	p := driver.First(
		driver.Check(len(o.NamePrefix) <= MaxNamePrefix, "NamePrefix", fmt.Sprintf("longer than %d characters", MaxNamePrefix)),
		driver.Check(validName(o.NamePrefix), "NamePrefix", fmt.Sprintf("%q may hold only letters, digits, '-' and '_'", o.NamePrefix)),
		driver.WholeSeconds("VisibilityTimeout", o.VisibilityTimeout, time.Second, 12*time.Hour),
		driver.Check(o.HeartbeatInterval > 0 && o.HeartbeatInterval < o.VisibilityTimeout, "HeartbeatInterval", "must be positive and shorter than VisibilityTimeout"),
		driver.WholeSeconds("WaitTime", o.WaitTime, time.Second, 20*time.Second),
	)
	return driver.Invalid[errorFamily](p)
}

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("sqs: invalid options")
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("sqs: invalid name")
	// ErrMessageTooLarge is wrapped by every *MessageTooLargeError.
	ErrMessageTooLarge = errors.New("sqs: message too large")
	// ErrVisibilityLost is the cause of a delivery context cancelled
	// because the transport could not extend the message's visibility:
	// another consumer may receive it now (context.Cause reports it).
	ErrVisibilityLost = errors.New("sqs: message visibility lost")
)

// errorFamily makes the kit's typed errors SQS's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "sqs", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options field or New argument: Field
// names it ("VisibilityTimeout"), Reason says why. It matches
// ErrInvalidOptions.
type OptionsError = driver.OptionsError[errorFamily]

// NameError reports a queue or message type name the transport cannot use,
// such as an empty one: What is "queue", "event type" or "handler". It
// matches ErrInvalidName.
type NameError = driver.NameError[errorFamily]

func checkName(what, name string) error { return driver.NonEmpty[errorFamily](what, name) }

// MessageTooLargeError is returned by Send and Publish, before anything is
// sent, for a message larger than MaxMessageBytes as SQS and SNS count it.
type MessageTooLargeError struct {
	ID    string // the envelope's ID
	Size  int    // body as sent plus message attributes, in bytes
	Limit int    // MaxMessageBytes
}

// Error describes the failure.
func (e *MessageTooLargeError) Error() string {
	return fmt.Sprintf("sqs: message %s is %d bytes with its attributes; SQS and SNS carry at most %d", e.ID, e.Size, e.Limit)
}

// Unwrap returns ErrMessageTooLarge.
func (e *MessageTooLargeError) Unwrap() error { return ErrMessageTooLarge }

// Is reports whether target is bus.ErrPermanent: sending the message again
// cannot help, so the dispatcher does not retry a scheduled one for ever.
func (e *MessageTooLargeError) Is(target error) bool { return target == bus.ErrPermanent }

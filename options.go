package bus

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// reservedHeaderPrefix starts every header the bus itself reads.
const reservedHeaderPrefix = "postbus."

// MaxDelay is the longest delay DeliverAfter and DeliverAt accept: five
// years. A longer delay is almost certainly a unit mistake (nanoseconds for
// seconds), and is rejected with an *OptionError.
const MaxDelay = 5 * 365 * 24 * time.Hour

// MaxMessageIDLength is the longest message ID, in bytes, that the bus
// creates or accepts from WithMessageID. Every store and transport of
// Postbus holds IDs of this length (a RabbitMQ message-id holds 255 bytes).
const MaxMessageIDLength = 200

// Option changes one outgoing message. Options are checked before anything
// is sent or stored; a bad one returns an *OptionError, which matches
// ErrInvalidOption (and ErrConflictingDelivery for DeliverAfter with
// DeliverAt).
type Option func(*sendOptions) error

type sendOptions struct {
	headers       map[string]string
	attributes    map[string]string
	sticky        map[string]string
	correlationID string
	messageID     string
	destination   string
	replyTo       string
	after         time.Duration
	hasAfter      bool
	at            time.Time
	hasAt         bool
	ttbr, ttrq    time.Duration
	orderingKey   string
}

// DeliverAfter delivers the message d from now. With d <= 0 it is sent at
// once; d must not be negative or exceed MaxDelay.
func DeliverAfter(d time.Duration) Option {
	return func(o *sendOptions) error {
		switch {
		case d < 0:
			return &OptionError{Option: "DeliverAfter", Reason: fmt.Sprintf("negative delay %v", d)}
		case d > MaxDelay:
			return &OptionError{Option: "DeliverAfter", Reason: fmt.Sprintf("delay %v exceeds MaxDelay (%v)", d, MaxDelay)}
		}
		o.after, o.hasAfter = d, true
		return nil
	}
}

// DeliverAt delivers the message at t. A t that is not in the future sends
// at once; t must not be more than MaxDelay ahead.
func DeliverAt(t time.Time) Option {
	return func(o *sendOptions) error {
		if t.IsZero() {
			return &OptionError{Option: "DeliverAt", Reason: "zero time"}
		}
		o.at, o.hasAt = t, true
		return nil
	}
}

// WithHeader sets a header on the message. Keys starting with "postbus."
// are reserved for the bus (timers, retries, failures) and are refused.
func WithHeader(key, value string) Option {
	return func(o *sendOptions) error {
		switch {
		case key == "":
			return &OptionError{Option: "WithHeader", Reason: "empty key"}
		case strings.HasPrefix(key, reservedHeaderPrefix):
			return &OptionError{Option: "WithHeader", Reason: fmt.Sprintf("header %q is reserved: keys starting with %q belong to the bus", key, reservedHeaderPrefix)}
		}
		o.headers = setKey(o.headers, key, value)
		return nil
	}
}

// WithAttribute sets an attribute that travels with this message only.
func WithAttribute(key, value string) Option {
	return func(o *sendOptions) error {
		if key == "" {
			return &OptionError{Option: "WithAttribute", Reason: "empty key"}
		}
		o.attributes = setKey(o.attributes, key, value)
		return nil
	}
}

// WithStickyAttribute sets an attribute that travels with this message and
// every message sent while handling it, hop after hop.
func WithStickyAttribute(key, value string) Option {
	return func(o *sendOptions) error {
		if key == "" {
			return &OptionError{Option: "WithStickyAttribute", Reason: "empty key"}
		}
		o.sticky = setKey(o.sticky, key, value)
		return nil
	}
}

// WithCorrelationID sets the correlation ID, overriding the one inherited
// from the message being handled.
func WithCorrelationID(id string) Option {
	return func(o *sendOptions) error {
		o.correlationID = id
		return nil
	}
}

// WithMessageID sets the message ID instead of a generated UUIDv7. The ID
// must be 1 to MaxMessageIDLength bytes of valid UTF-8 without control
// characters; any other is an *OptionError, and nothing is sent or stored.
// Stores compare IDs byte for byte.
//
// Re-sending with the same ID lets receivers and stores de-duplicate. The
// scheduled-message store keeps one row per ID: a message stored (delayed,
// in a batch, or through the outbox) under the ID of a row still stored
// keeps the first message, even when the bodies differ, and the second is
// dropped without an error. An endpoint with the outbox on handles one
// message per ID within Outbox.Retention. An immediate send without the
// outbox goes straight to the transport, which does not de-duplicate.
func WithMessageID(id string) Option {
	return func(o *sendOptions) error {
		if reason := messageIDProblem(id); reason != "" {
			return &OptionError{Option: "WithMessageID", Reason: reason}
		}
		o.messageID = id
		return nil
	}
}

// messageIDProblem says what makes id unfit as a message ID, or "" when it
// is fit: IDs are non-empty valid UTF-8 without control characters, at most
// MaxMessageIDLength bytes.
func messageIDProblem(id string) string {
	switch {
	case id == "":
		return "empty message ID"
	case len(id) > MaxMessageIDLength:
		return fmt.Sprintf("message ID is %d bytes, over MaxMessageIDLength (%d)", len(id), MaxMessageIDLength)
	case !utf8.ValidString(id):
		return fmt.Sprintf("message ID %q is not valid UTF-8", id)
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return fmt.Sprintf("message ID %q contains a control character", id)
	}
	return ""
}

// WithOrderingKey asks for the message to be handled after every earlier
// message with the same key sent to the same queue (Envelope.OrderingKey).
// Transports that order by key (Kafka partitions, SQS FIFO message groups)
// keep the order; others carry the key and deliver as usual. The key must
// be 1 to 200 bytes.
//
// On their way through the scheduled-message store (the outbox, SendBatch)
// messages with one key reach the transport in the order they were sent,
// as immediate sends do: the messages of one handling or one batch fall
// due a microsecond apart, and the dispatcher hands the messages of one
// key over one after another. When one of them fails to reach the
// transport, the later ones of its key wait and are retried after it
// (each counts a failure of its own). A message whose dispatcher died
// while holding it comes back after its lease, possibly out of order.
func WithOrderingKey(key string) Option {
	return func(o *sendOptions) error {
		if key == "" || len(key) > 200 {
			return &OptionError{Option: "WithOrderingKey", Reason: "must be 1 to 200 bytes"}
		}
		o.orderingKey = key
		return nil
	}
}

// To sends a command to the named endpoint, overriding its route.
func To(endpoint string) Option {
	return func(o *sendOptions) error {
		if err := validateQueueName("To", endpoint); err != nil {
			return &OptionError{Option: "To", Reason: err.(*ConfigError).Reason}
		}
		o.destination = endpoint
		return nil
	}
}

// ReplyTo asks the receiving endpoint to send its replies (Reply) to queue
// instead of to this endpoint: it sets HeaderReplyTo. The queue name is
// checked as an endpoint name is.
func ReplyTo(queue string) Option {
	return func(o *sendOptions) error {
		if err := validateQueueName("ReplyTo", queue); err != nil {
			return &OptionError{Option: "ReplyTo", Reason: err.(*ConfigError).Reason}
		}
		o.replyTo = queue
		return nil
	}
}

func setKey(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = make(map[string]string, 2)
	}
	m[k] = v
	return m
}

func parseOptions(opts []Option) (sendOptions, error) {
	var o sendOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.hasAfter && o.hasAt {
		return o, &OptionError{Option: "DeliverAt", Reason: "given together with DeliverAfter: give a delay or a time, not both",
			Err: ErrConflictingDelivery}
	}
	return o, nil
}

// dueAt returns when the message is due, or the zero time when no due
// time was asked for (none, or DeliverAfter(0)). A DeliverAt time that has
// passed is returned as it is: the message is sent at once, and its
// envelope says when it was due, as the copy the dispatcher would have
// sent at that time does (transports that de-duplicate, like NATS, see one
// message when a caller retries a delayed send after its due time).
func (o *sendOptions) dueAt(now time.Time) (time.Time, error) {
	var due time.Time
	switch {
	case o.hasAfter && o.after > 0:
		due = now.Add(o.after)
	case o.hasAt:
		if o.at.Sub(now) > MaxDelay {
			return time.Time{}, &OptionError{Option: "DeliverAt", Reason: fmt.Sprintf("%v is more than MaxDelay (%v) ahead", o.at, MaxDelay)}
		}
		due = o.at
	}
	if due.IsZero() {
		return time.Time{}, nil
	}
	return due.UTC(), nil
}

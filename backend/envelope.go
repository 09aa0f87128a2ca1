package backend

import (
	"maps"
	"time"
)

// Kind says how a message travels: a command to one endpoint, an event to
// every subscriber, or a reply to the sender of the message being handled.
type Kind uint8

// The message kinds.
const (
	KindCommand Kind = iota + 1 // sent to one endpoint with Send
	KindEvent                   // published to every subscribed endpoint
	KindReply                   // sent back to the sender with Reply
)

// String returns "command", "event" or "reply".
func (k Kind) String() string {
	switch k {
	case KindCommand:
		return "command"
	case KindEvent:
		return "event"
	case KindReply:
		return "reply"
	}
	return "unknown"
}

// Envelope is a message as it travels between endpoints: the serialized body
// and everything the bus knows about it. Transports carry envelopes; stores
// keep them encoded with MarshalEnvelope.
type Envelope struct {
	// ID is unique and time-ordered (UUIDv7 unless the sender chose one with
	// WithMessageID). A scheduled message keeps its ID until it is delivered.
	ID string
	// Type is the stable message type name (see MessageName).
	Type string
	// Kind is command, event or reply.
	Kind Kind
	// Body is the serialized message.
	Body []byte
	// ContentType names the serializer that produced Body.
	ContentType string
	// Headers are free-form string pairs; the bus's own use the "postbus."
	// prefix (see the Header constants).
	Headers map[string]string
	// CorrelationID ties together the messages of one conversation.
	CorrelationID string
	// Attributes travel with this message only.
	Attributes map[string]string
	// StickyAttributes travel with this message and every message sent while
	// handling it.
	StickyAttributes map[string]string
	// Source is the endpoint that sent the message.
	Source string
	// Destination is the queue a command or reply is sent to; empty for events.
	Destination string
	// SentAt is when the sender called Send or Publish.
	SentAt time.Time
	// DueAt is when the message was due: the time DeliverAfter or DeliverAt
	// asked for, kept when it had already passed and the message was sent
	// at once (then it is not after SentAt); zero for messages sent without
	// one.
	DueAt time.Time
	// ExpiresAt is when the message stops being worth handling (message
	// timers); zero when it never expires.
	ExpiresAt time.Time
	// OrderingKey groups messages that must be handled in send order
	// (WithOrderingKey); transports that order (bustest.Features.OrderedByKey)
	// keep messages with one key in order. Empty: no ordering asked for.
	OrderingKey string
}

// Clone returns a deep copy, so a transport or middleware may change it
// without touching the sender's value.
func (e *Envelope) Clone() *Envelope {
	c := *e
	c.Body = append([]byte(nil), e.Body...)
	c.Headers = maps.Clone(e.Headers)
	c.Attributes = maps.Clone(e.Attributes)
	c.StickyAttributes = maps.Clone(e.StickyAttributes)
	return &c
}

// Header returns the header value for key, or "".
func (e *Envelope) Header(key string) string { return e.Headers[key] }

// SetHeader sets a header, allocating the map if needed.
func (e *Envelope) SetHeader(key, value string) {
	if e.Headers == nil {
		e.Headers = make(map[string]string, 4)
	}
	e.Headers[key] = value
}

// Headers the bus sets itself.
const (
	// HeaderReplyTo is the queue replies go to, when it is not the sender's
	// endpoint (Envelope.Source). Set it with the ReplyTo send option.
	HeaderReplyTo = "postbus.reply-to"
	// HeaderFailureReason is the error text of a message moved to the error queue.
	HeaderFailureReason = "postbus.failure.reason"
	// HeaderFailureEndpoint is the endpoint where the message failed.
	HeaderFailureEndpoint = "postbus.failure.endpoint"
	// HeaderFailureQueue is the queue the message failed in; Replay sends it back there.
	HeaderFailureQueue = "postbus.failure.queue"
	// HeaderFailureTime is when the message was moved (RFC 3339, UTC).
	HeaderFailureTime = "postbus.failure.time"
	// HeaderFailureAttempts is how many times handling was attempted, across
	// every immediate and delayed retry.
	HeaderFailureAttempts = "postbus.failure.attempts"
	// HeaderFailureKind classifies the failure: "handler", "poison", "dispatch".
	HeaderFailureKind = "postbus.failure.kind"
	// HeaderDelayedRetries counts the delayed retries a message has had.
	HeaderDelayedRetries = "postbus.retries.delayed"
	// HeaderDispatchRetries is, on a scheduled message, the
	// Dispatcher.NumberOfRetries of the endpoint that scheduled it: the
	// dispatcher that hands it over applies it, not its own. It stays
	// in the store: the message handed to the transport does not carry
	// it, nor HeaderDispatchBackoff.
	HeaderDispatchRetries = "postbus.dispatch.retries"
	// HeaderDispatchBackoff is, on a scheduled message, the
	// Dispatcher.RetryBackoff (a Go duration) of the endpoint that
	// scheduled it, applied as HeaderDispatchRetries is.
	HeaderDispatchBackoff = "postbus.dispatch.backoff"
	// HeaderDecodeError is set by a transport that could not read a wire
	// message; the core then moves the message to the error queue.
	HeaderDecodeError = "postbus.decode-error"
)

package rabbitmq

import (
	"log/slog"
	"time"

	"github.com/postbus/bus/driver"
)

// Queue types accepted by Options.QueueType.
const (
	// QueueTypeQuorum declares replicated, durable quorum queues (the default).
	QueueTypeQuorum = "quorum"
	// QueueTypeClassic declares durable classic queues.
	QueueTypeClassic = "classic"
)

// DefaultEventsExchange is the topic exchange events are published to when
// Options.EventsExchange is empty.
const DefaultEventsExchange = "postbus.events"

// Options tune a Transport. Every zero value means the documented default.
type Options struct {
	// QueueType is the type of every queue Provision declares: "quorum" or
	// "classic". Default: "quorum", or "classic" on servers older than
	// RabbitMQ 3.8, which have no quorum queues. A queue that already exists
	// keeps its type; declaring it with another type fails.
	QueueType string
	// EventsExchange is the durable topic exchange Publish sends events to
	// and Provision binds subscribing queues to. Default: "postbus.events".
	EventsExchange string
	// PublisherChannels is the number of AMQP channels, in confirm mode,
	// that Send and Publish share. Default: 4.
	PublisherChannels int
	// MaxInFlight bounds the unconfirmed publishes on each publisher
	// channel; further sends wait for a slot. Default: 256.
	MaxInFlight int
	// Prefetch is the number of unacknowledged messages the broker sends
	// each consumer ahead of its handlers. Default: 4× the Receive call's
	// concurrency, at least 32. With prefetch equal to the concurrency, each handler
	// waits for its ack to pass through the quorum queue's log before it
	// gets the next message, which costs about half the throughput on
	// short handlers. Handlers in flight stay bounded by the concurrency
	// either way; a consumer that stops requeues what it has not started,
	// and one that dies has its messages redelivered by the broker. Set it
	// equal to the concurrency for strict fairness between consumers.
	Prefetch int
	// ExpiryMargin is added to Envelope.ExpiresAt (message timers) to give
	// the broker a per-message expiration as a safety net: a message that
	// sits in a queue that long past its expiry (no consumer running) is
	// dropped by the broker. The bus's own check, which dead-letters and
	// acknowledges, runs first whenever a consumer sees the message. A
	// message with a zero ExpiresAt gets no broker expiration, whatever its
	// headers say, so copies in the error and dead-letter queues stay.
	// Default: 1 minute; negative: no broker expiration.
	ExpiryMargin time.Duration
	// ConnectionName is the name the connection shows in the RabbitMQ
	// management UI and `rabbitmqctl list_connections`. Default: "postbus".
	ConnectionName string
	// Heartbeat is the AMQP heartbeat interval; a peer silent for about
	// two intervals is considered gone. Default: 10s.
	Heartbeat time.Duration
	// DialTimeout bounds each TCP connect and AMQP handshake. Default: 10s.
	DialTimeout time.Duration
	// ReconnectMin is the first delay between reconnection attempts; the
	// delay doubles on each failure up to ReconnectMax, with jitter.
	// Default: 100ms.
	ReconnectMin time.Duration
	// ReconnectMax caps the delay between reconnection attempts.
	// Default: 5s.
	ReconnectMax time.Duration
	// Logger receives connection events and failures. Default: slog.Default().
	Logger *slog.Logger
	// OnError, when set, is called for failures that happen in the
	// background and have no caller to return to: a lost connection, a
	// failed reconnection attempt, an acknowledgement that could not be
	// sent. It must not block.
	OnError func(error)
}

func (o Options) withDefaults() Options {
	driver.Default(&o.EventsExchange, DefaultEventsExchange)
	driver.Default(&o.PublisherChannels, 4)
	driver.Default(&o.MaxInFlight, 256)
	driver.Default(&o.ExpiryMargin, time.Minute)
	driver.Default(&o.ConnectionName, "postbus")
	driver.Default(&o.Heartbeat, 10*time.Second)
	driver.Default(&o.DialTimeout, 10*time.Second)
	driver.Default(&o.ReconnectMin, 100*time.Millisecond)
	driver.Default(&o.ReconnectMax, 5*time.Second)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o Options) validate() error {
	var exchange *driver.Problem
	if err := checkName("EventsExchange", o.EventsExchange); err != nil {
		exchange = &driver.Problem{Field: "EventsExchange", Reason: err.(*NameError).Reason}
	}
	p := driver.First(
		driver.Check(o.QueueType == "" || o.QueueType == QueueTypeQuorum || o.QueueType == QueueTypeClassic, "QueueType", `must be "quorum" or "classic"`),
		exchange,
		driver.NotNegative("PublisherChannels", o.PublisherChannels),
		driver.NotNegative("MaxInFlight", o.MaxInFlight),
		driver.NotNegative("Prefetch", o.Prefetch),
		driver.NotNegative("Heartbeat", o.Heartbeat),
		driver.NotNegative("DialTimeout", o.DialTimeout),
		driver.NotNegative("ReconnectMin", o.ReconnectMin),
		driver.NotNegative("ReconnectMax", o.ReconnectMax),
		driver.Check(o.ReconnectMax <= 0 || o.ReconnectMin <= o.ReconnectMax, "ReconnectMin", "must not exceed ReconnectMax"),
	)
	return driver.Invalid[errorFamily](p)
}

// Log keys used by the transport.
const (
	logKeyErr     = "err"
	logKeyQueue   = "queue"
	logKeyDelay   = "retry_in"
	logKeyName    = "connection"
	logKeyAttempt = "attempt"
)

// Package rabbitmq is the Postbus transport for RabbitMQ, built on
// github.com/rabbitmq/amqp091-go. It implements bus.Transport:
//
//	t, err := rabbitmq.New("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Options{})
//	if err != nil { ... }
//	defer t.Close(context.Background())
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t})
//
// # Topology
//
// Provision (called by the bus's Start) declares, idempotently:
//   - the events exchange, a durable topic exchange named
//     Options.EventsExchange ("postbus.events" by default);
//   - one durable queue per endpoint (bus.Topology.Queue, the endpoint
//     name) and per extra queue (bus.Topology.Queues: the error and
//     dead-letter queues), quorum queues by default (Options.QueueType);
//   - one binding per subscribed event type, from the events exchange to
//     the endpoint's queue, with the type name (for example
//     "github.com/acme/sales.OrderPlaced") as the routing key.
//
// The transport creates nothing else: commands and replies go through the
// default exchange, whose routing key is the queue name, and events through
// the events exchange. Each connection declares the events exchange when it
// opens, so Publish works before any Provision.
//
// # Sending
//
// Messages are persistent, and Send and Publish return only after the broker
// confirmed them (publisher confirms); a negative confirm is ErrNacked. Send
// sets the mandatory flag, so a send to a queue that does not exist fails
// with ErrUnroutable instead of vanishing; Publish does not, since an event
// nobody subscribes to is not an error. ErrUnroutable and ErrTooLarge (a
// message over the broker's max_message_size) match bus.ErrPermanent, so
// the dispatcher moves a scheduled message that fails so to the error queue
// instead of retrying it for ever. Publishes are pipelined over
// Options.PublisherChannels confirm-mode channels. SendBatch
// (bus.BatchTransport) hands many messages over in one call, written
// without waiting and each settled by its own confirm; the dispatcher uses
// it for a claimed batch of due messages.
//
// # Receiving
//
// Receive sets the prefetch to four times the requested concurrency, at
// least 32 (Options.Prefetch overrides it), runs at most that concurrency of handlers,
// acknowledges a message after its handler returned nil and
// requeues it after an error.
// Stopping (the context ends) cancels the consumer, requeues what was not
// started and waits for the handlers in flight.
//
// # Connection loss
//
// The transport owns its connection and reconnects with exponential backoff
// (Options.ReconnectMin to ReconnectMax, with jitter). Consumers resume on
// the new connection; messages that were unacknowledged when it was lost are
// redelivered by the broker. A Send or Publish during an outage waits for the
// connection to come back; if its context ends first it fails with an error
// matching ErrNotConnected and the context's error, and nothing was sent.
// A message whose confirm was lost with the connection is published again on
// the next one under the same message ID, so a queue may receive it twice:
// delivery is at-least-once, and receivers de-duplicate by ID. Background
// failures are logged and passed to Options.OnError.
//
// # Errors that retrying cannot fix
//
// When the broker refuses the connection itself (403 ACCESS_REFUSED: a
// wrong user name or password; 530 NOT_ALLOWED: a vhost that does not exist
// or that the user may not use), waiting would never end. Provision (and so
// the bus's Start), Send, Publish and Receive then fail at once with a
// *PermanentError that carries the broker's reason and matches ErrPermanent;
// the password never appears in it. RabbitMQ answers a failed login only
// after about 3 seconds and without a reason the client can tell from a
// connection cut at that moment, so the transport confirms it with a second
// attempt: Start fails about 6 seconds after a wrong password, at once after
// a missing vhost. A 530 for a vhost that is down or a connection limit that
// is reached heals by itself and is waited out like an outage. The transport
// keeps trying in the background at the reconnection backoff, so once an
// administrator creates the vhost or restores the password, calls succeed
// again without a new Transport. Refusals on a channel (a queue that does
// not exist, a declaration that conflicts with an existing queue, missing
// permissions) are a *PermanentError too.
//
// # Envelope mapping
//
// Envelope.ID, CorrelationID, Type and ContentType travel in the AMQP
// properties message-id, correlation-id, type and content-type; SentAt in
// timestamp (whole seconds) and, exactly, in a header; Body is the message
// body. Everything else travels in AMQP headers prefixed "postbus-" (see
// HeaderVersion and the other Header constants): times as RFC 3339 strings
// with nanoseconds (returned in UTC), and Headers, Attributes and
// StickyAttributes as nested tables. Every field round-trips exactly; empty
// maps arrive as nil. A delivery without the postbus-version header (from a
// foreign publisher), or with a malformed postbus header, still reaches the
// handler, with the raw body, the properties it had, its AMQP headers as
// text and bus.HeaderDecodeError set.
//
// # Limits
//
// AMQP short strings bound queue names, event type names, message IDs,
// correlation IDs, content types and header keys to 255 bytes; longer values
// are rejected with a *NameError or *FieldError before anything is sent.
// Event types may contain dots and slashes, but no dot-separated word may be
// exactly "*" or "#" (topic wildcards). A message with a time to be received
// (Envelope.ExpiresAt) gets an AMQP expiration of ExpiresAt plus
// Options.ExpiryMargin (1 minute) as a safety net: the bus's own check, which
// dead-letters and acknowledges, sees it first whenever a consumer runs.
package rabbitmq

package backend

import "context"

// Transport moves envelopes between endpoints. RabbitMQ, NATS and the
// in-memory transport implement it; the core adds everything else (routing
// decisions, retries, the error queue, delayed delivery), so a driver stays
// small.
//
// Semantics every implementation keeps (bustest.TransportTests checks them):
//   - Send and Publish return nil only once the message is safely accepted
//     (broker confirm, durable write); they honour ctx.
//   - Several Receive calls on one queue, in one or several processes, are
//     competing consumers: each message goes to one of them.
//   - A message is acknowledged only when the DeliveryHandler returned nil.
//     On an error it becomes available again (requeue, nak, redelivery).
//   - Envelope fields, headers and attributes round-trip unchanged.
type Transport interface {
	// Provision creates what the topology needs (queues, subscriptions),
	// idempotently. It is called by Start and may be called ahead of time.
	Provision(ctx context.Context, t Topology) error
	// Send delivers env to the named queue.
	Send(ctx context.Context, queue string, env *Envelope) error
	// Publish delivers env to every queue subscribed to env.Type. With no
	// subscribers the event goes nowhere, and that is not an error.
	Publish(ctx context.Context, env *Envelope) error
	// Receive consumes the queue, calling h for each message with at most
	// opts.Concurrency calls at once, until ctx ends. It then stops fetching,
	// waits for the calls in flight, settles them, and returns nil. It
	// returns an error only when it cannot consume at all.
	Receive(ctx context.Context, queue string, opts ReceiveOptions, h DeliveryHandler) error
}

// Topology is what one endpoint needs from its transport.
type Topology struct {
	// Queue is the endpoint's input queue (the endpoint name).
	Queue string
	// Events are the message types the endpoint subscribes to; published
	// events of these types are delivered to Queue.
	Events []string
	// Queues are further queues that must exist, such as the error and
	// dead-letter queues.
	Queues []string
}

// ReceiveOptions tune a Receive call.
type ReceiveOptions struct {
	// Concurrency bounds the handler calls in flight (and the prefetch).
	Concurrency int
}

// DeliveryHandler handles one received envelope. It runs on its own context,
// not Receive's, so a message in flight when Receive's ctx ends is finished
// and settled. Returning nil acknowledges the message; an error hands it
// back to the transport for redelivery.
//
// A transport that cannot decode a wire message still calls the handler,
// with the raw bytes as Body and HeaderDecodeError set; the core moves it to
// the error queue.
type DeliveryHandler func(ctx context.Context, env *Envelope) error

// TransportIdentity is implemented by transports that can name what they
// connect to: the broker namespace (a RabbitMQ vhost and events exchange, a
// NATS stream and subject prefix). Two Transport values with the same identity
// reach the same queues. Scheduled rows carry the identity of the transport
// they were scheduled through, and a dispatcher claims only rows of its own
// transport's identity, so services that share a database but not a broker
// never send each other's rows, while a send-only bus and a dispatching bus
// on the same broker share theirs.
//
// A transport without Identity (or with an empty one) schedules rows with an
// empty identity, which every dispatcher on the store claims, and its own
// dispatcher claims only such rows. A wrapper around a transport (for
// tracing, fault injection) should forward the wrapped transport's Identity,
// so its rows stay scoped to the broker.
type TransportIdentity interface {
	// Identity names the broker and namespace; it must not contain secrets.
	Identity() string
}

// BatchTransport is implemented by transports that can hand many envelopes
// to the broker in one call with their confirmations pipelined: every
// message is written without waiting for the one before it, and each is
// settled by the broker's answer for that message alone (a RabbitMQ
// publisher confirm tracked by delivery tag, a JetStream publish
// acknowledgement). The dispatcher uses it, when the transport has it, to
// hand over a claimed batch of due rows at the broker's pipelined rate
// rather than at one confirm round trip per row and goroutine.
//
// The guarantees are those of Send and Publish, per message:
//   - the result for a message is nil only once the broker confirmed that
//     message; a message refused, unroutable, invalid or unconfirmed when
//     ctx ends gets its own error, and the other messages are unaffected;
//   - an error does not prove that the broker did not take the message (a
//     confirm lost with the connection, or one that arrives after ctx
//     ended), so a message whose result is an error may be sent again:
//     at least once, same message ID;
//   - ctx bounds the whole call; a result for a message still unconfirmed
//     when it ends wraps ctx's error.
//
// A transport bounds the messages in flight itself (its publish window),
// so a batch larger than the window is written as confirms free room.
// Messages of one batch may reach their queues in any order.
type BatchTransport interface {
	Transport
	// SendBatch hands each message of batch to the broker and returns one
	// result per message, in batch order: nil when the broker confirmed it.
	// It is safe to call concurrently with itself, Send and Publish.
	SendBatch(ctx context.Context, batch []Outbound) []error
}

// Outbound is one message of a SendBatch call: sent to Queue as by Send, or,
// with Publish, published to the subscribers of Envelope.Type as by Publish.
type Outbound struct {
	// Queue is the destination queue of a send; it is ignored when Publish
	// is set.
	Queue string
	// Publish publishes the envelope instead of sending it to Queue.
	Publish bool
	// Envelope is the message; SendBatch does not modify it.
	Envelope *Envelope
}

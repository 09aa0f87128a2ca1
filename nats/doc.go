// Package nats is the NATS JetStream transport of Postbus, built on
// github.com/nats-io/nats.go and its jetstream package.
//
//	nc, err := natsio.Connect(url, natsio.MaxReconnects(-1), natsio.ReconnectBufSize(-1))
//	t, err := nats.New(nc, nats.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t})
//
// The caller owns the *nats.Conn: its reconnect settings apply, and closing
// it is the caller's job. Connect it without a reconnect buffer
// (ReconnectBufSize(-1)); see Guarantees.
//
// # Topology
//
// One stream (Options.Stream, default "POSTBUS") with interest retention
// holds every queue and event of the bus, on two families of subjects under
// Options.SubjectPrefix (default "postbus"):
//
//	postbus.q.<queue>   commands and replies sent to a queue
//	postbus.e.<type>    events of a message type
//
// Queue and type names are escaped into single subject tokens (letters,
// digits and '-' stay, '_' becomes "__", any other byte "_XX" in hex), so
// "github.com/acme/sales.OrderPlaced" travels on
// postbus.e.github_2Ecom_2Facme_2Fsales_2EOrderPlaced.
//
// Each queue has one durable pull consumer, named after the escaped queue
// and filtering the queue's subject, and one more per event type its
// endpoint subscribes to ("<queue>_G<type>"), filtering that type's subject.
// Every process of an endpoint pulls from the same consumers, so they
// compete for its messages; each subscribing endpoint has its own event
// consumers, so each gets every event. Provision creates the stream and the
// consumers of the topology; Send creates the consumer of a queue nobody
// provisioned yet, so a command sent before its receiver first started is
// kept for it. With interest retention a message leaves the stream once
// every consumer that wants it acknowledged it; an event no endpoint
// subscribes to is dropped on arrival.
//
// # Guarantees
//
// Send and Publish return nil only after the stream acknowledged the
// message (PubAck). Concurrent calls pipeline over the connection: each
// waits for its own acknowledgement only. SendBatch (bus.BatchTransport)
// hands many messages over in one call, written without waiting and each
// settled by its own acknowledgement; the dispatcher uses it for a claimed
// batch of due messages.
//
// A Send that returns an error never reaches the stream later. It never
// publishes while the connection is down (it waits for the connection, up
// to its ctx and Options.PublishTimeout); when the connection drops after
// the message was written, it sends the message again once reconnected and
// the stream's answer (stored, or already stored) decides. The one gap is
// nats.go's reconnect buffer, into which a publish can slip in the instant
// the connection drops: connect with ReconnectBufSize(-1) to close it.
//
// The Nats-Msg-Id header is the message ID scoped by its subject
// ("<id>@<subject>"), so the stream drops a re-send of one message to one
// destination within Options.DuplicateWindow: a caller retrying a failed
// Send (stamped with a new SentAt), the dispatcher sending a row again, a
// handler retried on the same delivery. Copies the bus makes again on
// purpose carry a digest of what sets them apart: a delayed retry (its
// count and due time), a move to the error or dead-letter queue (its time),
// and a send made while handling a delivery (that delivery's stream
// sequence, so a message replayed from the error queue is a new message).
//
// Delivery is at least once. A message is acknowledged after its handler
// returned nil and negatively acknowledged, hence redelivered, after an
// error. While a handler runs the transport reports progress every
// AckWait/3, so slow handlers keep their message. A process that dies with
// messages in flight loses none: they are redelivered after AckWait.
//
// # Wire format
//
// The body is the envelope's Body; every other envelope field is a header
// (Postbus-Id, Postbus-Type, Postbus-Kind, ..., Postbus-H-<key> for headers,
// Postbus-A-<key> for attributes, Postbus-S-<key> for sticky attributes), so
// the nats CLI shows messages readably. A message whose headers cannot be
// read still reaches the handler, with its raw body and
// bus.HeaderDecodeError set.
//
// # Limits
//
// All endpoints sharing a stream share its throughput; give groups of
// endpoints that never talk to each other their own Stream and
// SubjectPrefix to spread load. The transport remembers which queue
// consumers it found; if an operator deletes one while the transport runs,
// sends to that queue are dropped by the stream until Provision runs again.
package nats

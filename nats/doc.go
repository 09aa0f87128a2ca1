// Package nats is the NATS JetStream transport of Postbus, built on
// github.com/nats-io/nats.go and its jetstream package.
//
//	nc, err := natsio.Connect(url, natsio.MaxReconnects(-1))
//	t, err := nats.New(nc, nats.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t})
//
// The caller owns the *nats.Conn: its reconnect settings apply, and closing
// it is the caller's job.
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
// Each queue has one durable pull consumer, named after the escaped queue,
// filtering the queue's subject and the subjects of the events its endpoint
// subscribes to. Every process of an endpoint pulls from that consumer, so
// they compete for its messages; each subscribing endpoint has its own
// consumer, so each gets every event. Provision creates the stream and the
// consumers of the topology; Send creates the consumer of a queue nobody
// provisioned yet (with no event subscriptions), so a command sent before its
// receiver first started is kept for it. With interest retention a message
// leaves the stream once every consumer that wants it acknowledged it; an
// event no endpoint subscribes to is dropped on arrival.
//
// # Guarantees
//
// Send and Publish return nil only after the stream acknowledged the
// message (PubAck). Concurrent calls pipeline over the connection: each
// waits for its own acknowledgement only. The Nats-Msg-Id header is the
// message ID scoped by its destination ("<id>@q.<queue>"), so the server
// drops a re-send of one message to one destination within
// Options.DuplicateWindow, while the same message may still go to another
// queue (the error queue, say).
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

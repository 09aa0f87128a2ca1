// Package kafka is a Postbus transport on Apache Kafka, built on the
// franz-go client (kgo for producing and consuming, kadm for topics and
// offsets).
//
//	tr, err := kafka.New([]string{"127.0.0.1:9092"}, kafka.Options{TopicPrefix: "shop"})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr, Persistence: pg})
//
// # Topology
//
// Every queue is a topic, <prefix>.q.<queue>, and every event type is a
// topic, <prefix>.e.<type>; names are escaped to Kafka's character set
// (see names.go). Provision creates them with Options.Partitions and
// ReplicationFactor. Each queue has one consumer group, <prefix>.g.<queue>:
// every process receiving the queue joins it, and Kafka shares the
// partitions among them. An endpoint subscribed to event types consumes
// their topics with the same group; Provision records a new subscription
// by committing the event topic's end offsets for the group, so the
// endpoint receives the events published from then on. A Publish of a type
// nobody subscribed to finds no topic and goes nowhere.
//
// A topic per event type was chosen over one events topic with a type
// header: with one topic, every subscriber would fetch and discard every
// other type's events, so the cost of an endpoint grows with all the
// traffic of the bus instead of with what it subscribed to.
//
// # Ordering and acknowledgement
//
// Envelope.OrderingKey (bus.WithOrderingKey) is the record key: Kafka puts
// messages with one key on one partition, and Receive handles the records
// of one partition and key one at a time in offset order. Records of
// different keys, and records without a key, are handled concurrently,
// even within one partition, by ReceiveOptions.Concurrency workers that
// take records in the order they became ready. Records without a key go
// round-robin over the partitions.
//
// Offsets are committed every Options.CommitInterval, up to the first
// record of each partition that is not settled: a crash or a rebalance
// delivers the unsettled records again (at least once, same message IDs),
// and never skips one.
//
// Kafka cannot redeliver a single record. The core does not need it: a
// failed message is retried in place (immediate retries), then through the
// store (delayed retries, with a durable persistence), then moved to the
// error topic, and each of these settles the record, so a failing message
// never holds its partition. The DeliveryHandler returns an error only
// when none of them was possible (the store and the error topic both
// unreachable): the record is then handled again in place after a pause,
// holding back its own key and the partition's commits, but not the
// partition's other keys. Delayed retries take a message out of its key's
// order; keep Retries.Delayed at zero where order matters more.
//
// # Rebalance
//
// When a partition is revoked, its handlers see their ctx cancelled;
// Receive waits up to Options.RevokeWait for them, commits what was
// settled, and lets the partition go. On a lost membership nothing is
// committed. The new owner starts from the last commit.
//
// # Clients and security
//
// The transport creates its own franz-go clients from the seed addresses:
// one for producing and administration, and one per Receive. Options.
// ClientOptions reach all of them (kgo.DialTLSConfig, kgo.SASL, a client ID,
// hooks), Options.ConsumerOptions the consumers only (group timings, fetch
// sizes).
package kafka

// Package driver is the kit for people writing a Postbus transport: the
// parts every transport needs and that do not depend on the broker, written
// once, so that a transport keeps only what its broker makes different.
// The transports of this repository (NATS, SQS, Kafka, Redis Streams,
// RabbitMQ, PostgreSQL) are built on it. It imports only the standard
// library and the core.
//
// # Headers
//
// Mapping carries a *bus.Envelope in string key/value headers and reads it
// back. Keys names the header of each envelope field (DefaultKeys gives the
// reserved names, "Postbus-Id" and the rest); an Escaper writes values and
// map keys in the characters the broker takes (Percent for header values,
// with the broker's rules as its fields; Token; Verbatim); MaxKey and
// MaxValue carry the broker's size limits. A header the decoder cannot read
// is a *HeaderError; Undecodable builds the envelope that takes such a
// message to the error queue with the reason, instead of dropping it.
// FormatKind, ParseKind, FormatTime and ParseTime are the text forms of a
// kind and a time every mapping shares.
//
// # Names
//
// A queue or message type name may hold any character; broker names may
// not. Token escapes a name reversibly into ASCII letters, digits, '-' and
// '_'; Sanitize maps it to a broker's charset where the name need not be
// read back; Fit and Sanitize keep a name within the broker's length limit
// with a stable hash suffix, so long names that share a start still differ.
//
// # Options
//
// The checks (NotNegative, Positive, AtLeast, Between, WholeSeconds,
// Check) return a *Problem naming the field and the reason in the words
// every driver uses; First picks the first, and Invalid makes it the
// driver's typed OptionsError. Default and Logger fill zero fields.
//
// # Errors
//
// OptionsError and NameError are the typed errors of every driver. A
// driver makes them its own with an ErrorFamily, an empty type whose
// Sentinels method gives the driver's name and sentinels, and exports them
// as aliases (type OptionsError = driver.OptionsError[errorFamily]): the
// messages start with the driver's name, errors.Is matches the driver's
// ErrInvalidOptions and ErrInvalidName, and errors.As with one driver's
// type never matches another's. NonEmpty, CheckTopology and CheckReceive
// are the name checks Provision, Send and Receive share.
//
// # Receive pool
//
// Pool runs a transport's deliveries through the bus's handlers: starts in
// the order the messages were put in, across Concurrency workers, with a
// bounded read-ahead (counting messages until their settlement ends, with
// HoldUntilSettled), one at a time per ordering key (Key), and at Close
// hands back the messages not started while it waits for the running ones. Batcher gathers settlements into one
// broker call (an XACK or a DeleteMessageBatch of several messages), Retry
// retries an acknowledgement a bounded number of times, and Ordered tells
// how far the run of settled messages reaches, for brokers that commit an
// offset.
//
// # Secrets
//
// Connection strings carry passwords that must not reach a log, an error
// or an operator's screen. Redact replaces the password of a URL
// ("amqp://user:xxxxx@host/"), of a keyword/value DSN ("password=xxxxx")
// and of a go-sql-driver DSN ("user:xxxxx@tcp(host)/db"), also where such a
// string is part of a longer text. RedactText and RedactError take the
// connection strings a driver was given and remove their passwords from any
// text or error, in whatever form a client library echoed them.
package driver

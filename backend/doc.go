// Package backend is for people writing a Postbus store or transport: the
// interfaces a persistence or a transport implements, their optional
// capabilities (found by type assertion), the records they keep, the
// envelope and its binary codec, and the helpers and errors stores and
// transports share. It imports only the standard library.
//
// Applications use package bus (github.com/postbus/bus), which names every
// type here by an alias (bus.Transport is backend.Transport, bus.Envelope is
// backend.Envelope), so code written against either name works with both.
// The sentinel errors are the same values in both packages.
//
// # Transports
//
// Transport moves envelopes between endpoints; Topology, ReceiveOptions and
// DeliveryHandler are its arguments. Optional: TransportIdentity (scope
// scheduled rows to the broker), BatchTransport with Outbound (pipelined
// hand-over), Pinger (health).
//
// # Stores
//
// Persistence is the base of every store, ScheduledStore keeps the
// messages of delayed delivery as OutgoingMessage rows claimed with a
// Claim. Optional: AheadClaimer, DueNotifier, ClockedStore, HandOverJoiner,
// OutboxStore with HandlingTx, TxCarrier, TxCanceler, SagaStore,
// RecurringStore and RecurringRuntimeStore, ScheduledBrowser, FailedStore,
// PoolReporter, Pinger. The bustest package holds the conformance suites
// that define each.
//
// # Envelope
//
// Envelope is a message as it travels; Kind says how. MarshalEnvelope and
// UnmarshalEnvelope are the binary form stores keep; the Header constants
// name the reserved headers.
//
// # Helpers and errors
//
// CheckHistogram, NormalizeReason, FailureGroup and FailedFromEnvelope are
// what the operations stores share. Permanent and StoreUnavailable mark a
// transport's or a store's error so that errors.Is matches ErrPermanent or
// ErrStoreUnavailable.
package backend

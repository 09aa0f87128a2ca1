// Package dispatch is the dispatcher of scheduled messages: it claims the
// rows of a scheduled-message store (backend.ScheduledStore) as they fall
// due, hands them to the transport and settles them in the store. The bus
// builds one from a Config and a Host (the bus's dispatch_host.go) and
// runs it while it receives; nothing here imports the bus.
//
// # The loop
//
// Run claims a batch of due rows with a lease, hands each to the transport
// and settles the batch: deleted once accepted, recorded as failed (with
// the sender's backoff) otherwise, released when not attempted. It sleeps
// until the next due time or a Poke (dispatcher.go, batch.go). A row is
// deleted only after the transport accepted it: at least once, same ID.
//
// # The look-ahead
//
// With Config.LookAhead on a store that is an AheadClaimer, rows are
// claimed a window before they fall due and held in a heap until their
// time on the bus's clock, whatever the skew between the clocks
// (ahead.go). Claims run in the background beside the hand-overs
// (ahead_claim.go), the rows held are bounded by what the measured drain
// rate settles within half the lease (ahead_bound.go), and the settling
// of delivered rows is batched in the background (ahead_settle.go).
//
// # Hand-over
//
// Rows go to the transport concurrently, each within SendTimeout, or to a
// BatchTransport in pipelined SendBatch calls (pipeline.go). Rows of one
// ordering key form a lane and go one after another; a failed row holds
// the later ones back, in this batch and in later ones (order.go). The
// retry budget and backoff are those of the endpoint that scheduled a row
// (policy.go).
//
// # Circuit breakers
//
// A Breaker trips after failures that last its trigger time without a
// success, and then makes the dispatcher probe instead of hammering
// (breaker.go). The bus owns the store breaker and reports trips as
// CriticalError; the dispatcher's fetch and dispatch breakers come in its
// Config.
//
// # The inbox purge
//
// InboxPurge deletes the outbox's expired inbox rows in batches, every
// minute; the bus runs it beside the dispatcher (purge.go).
package dispatch

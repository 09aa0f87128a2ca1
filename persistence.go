package bus

import (
	"context"
	"time"
)

// Persistence is where an endpoint keeps state that must outlive a message:
// today the scheduled messages of delayed delivery. Capabilities are optional
// interfaces found by type assertion: ScheduledStore for delayed delivery,
// DueNotifier for cross-process wake-up, and Setup(ctx) error for schema
// creation, which Start calls unless Config.SkipSetup is set.
type Persistence interface {
	// Durable reports whether stored data survives a process restart.
	Durable() bool
}

// ScheduledStore stores messages until they are due, for the dispatcher.
// Rows are claimable from their due time; a claim leases them so several bus
// instances on one store dispatch each row once. bustest.ScheduledMessageTests
// defines the contract.
//
// Stores with a clock of their own (a database's now()) compare due and lease
// times on that clock and may ignore the now argument, so a skewed client
// clock cannot make a message early.
type ScheduledStore interface {
	// StoreOutgoing inserts rows. Storing an ID that is already stored keeps
	// the existing row, so a retried send cannot schedule twice.
	StoreOutgoing(ctx context.Context, msgs []OutgoingMessage) error
	// ClaimDueOutgoing returns up to limit rows that are claimable at now,
	// earliest first, and makes each unclaimable until now+lease.
	ClaimDueOutgoing(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]OutgoingMessage, error)
	// DeleteOutgoing removes rows; unknown IDs are ignored.
	DeleteOutgoing(ctx context.Context, ids []string) error
	// ReleaseOutgoing makes claimed rows claimable again at once, without
	// counting a failure (a dispatcher stopping with work in hand).
	ReleaseOutgoing(ctx context.Context, ids []string) error
	// RecordOutgoingFailures counts a failure on each row, keeps its error
	// text, and makes it claimable again at RetryAt.
	RecordOutgoingFailures(ctx context.Context, failures []OutgoingFailure) error
	// NextDueOutgoing returns when the earliest row becomes claimable, and
	// false when the store is empty.
	NextDueOutgoing(ctx context.Context) (time.Time, bool, error)
	// CancelOutgoing removes a row and reports whether it was there.
	CancelOutgoing(ctx context.Context, id string) (bool, error)
}

// DueNotifier is implemented by stores that can tell other processes that a
// row was stored (PostgreSQL LISTEN/NOTIFY), so their dispatchers wake before
// their next poll.
type DueNotifier interface {
	// WatchDue calls wake with the due time of each row stored by any
	// process, until ctx ends; then it returns nil. An error means watching
	// stopped; the dispatcher keeps polling and calls WatchDue again later.
	WatchDue(ctx context.Context, wake func(due time.Time)) error
}

// OutgoingMessage is one scheduled message: a row of the store.
type OutgoingMessage struct {
	ID         string    // the message ID
	Kind       Kind      // command, event or reply: how the dispatcher hands it over
	Envelope   []byte    // MarshalEnvelope output
	DueAt      time.Time // when it was due
	LeaseUntil time.Time // set by a claim
	Failures   int       // dispatch failures so far
	LastError  string    // the last dispatch failure
}

// OutgoingFailure records a failed dispatch of a claimed row.
type OutgoingFailure struct {
	ID      string
	Error   string
	RetryAt time.Time
}

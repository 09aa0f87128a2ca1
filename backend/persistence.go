package backend

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
// Rows are claimable from their due time; a claim holds them so several bus
// instances on one store dispatch each row once: a lease written on the
// rows, or (PostgreSQL, MySQL/MariaDB) row locks of a transaction that
// stays open until the claim's rows are settled, which a crashed process's
// connection gives back at once. bustest.ScheduledMessageTests
// defines the contract.
//
// # Lease ownership
//
// A claim gives every row it returns a lease token (OutgoingMessage.Token),
// new for each claim. Delete, release and record-failure name the rows with
// the token they were claimed with (a Claim) and change only rows that the
// token still holds: a row re-claimed after its lease lapsed, or cancelled
// and stored again, is never touched by the old claimant. They return how
// many rows they changed. CancelOutgoing does not remove a row whose lease is
// running: it is being delivered.
//
// # Whose clock
//
// Stores with a clock of their own (a database's now()) compare due, lease
// and retry times on that clock, and compute relative times themselves:
// a row with OutgoingMessage.Delay > 0 is due at the store's now + Delay, a
// failure with OutgoingFailure.RetryAfter > 0 is claimable again at now +
// RetryAfter, and a claim leases until now + lease. So a sender whose clock
// lags the store cannot make a message early. Stores without a clock (in
// memory) use DueAt, RetryAt and the now argument, which come from the bus's
// Config.Clock.
//
// # Transports
//
// Every row carries the identity of the transport it was scheduled through
// (OutgoingMessage.Transport, see TransportIdentity). A claim and the next
// due time consider only rows of the given transport (and rows with an empty
// transport, stored before rows carried one), so buses that share a store
// but not a broker never send each other's messages.
type ScheduledStore interface {
	// StoreOutgoing inserts rows. Storing an ID that is already stored keeps
	// the existing row, so a retried send cannot schedule twice; an ID named
	// twice in one call is stored once. The rows of one call are stored
	// together, all or none (Bus.SendBatch relies on it): a store without
	// transactions says in its documentation what it does instead. A row
	// with an empty ID or no envelope fails the call before anything is
	// stored.
	StoreOutgoing(ctx context.Context, msgs []OutgoingMessage) error
	// ClaimDueOutgoing returns up to limit rows of transport that are
	// claimable at now, earliest first, makes each unclaimable until
	// now+lease, and gives each a new lease token.
	ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]OutgoingMessage, error)
	// DeleteOutgoing removes the claimed rows that their tokens still
	// hold; it ignores the others.
	DeleteOutgoing(ctx context.Context, claims []Claim) (int, error)
	// ReleaseOutgoing ends the leases of claimed rows that their tokens
	// still hold, without counting a failure (a dispatcher stopping with
	// work in hand): each row is claimable again when it was before the
	// claim (AvailableAt: its due time, or the end of a failure's backoff),
	// so a release never cuts a backoff short.
	ReleaseOutgoing(ctx context.Context, claims []Claim) (int, error)
	// RecordOutgoingFailures counts a failure on each row its token still
	// holds, keeps the error text, ends the lease, and makes the row
	// claimable again after the failure's RetryAfter (or at its RetryAt).
	RecordOutgoingFailures(ctx context.Context, failures []OutgoingFailure) (int, error)
	// NextDueOutgoing returns when the earliest row of transport becomes
	// claimable, and false when there is none.
	NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error)
	// CancelOutgoing removes a row that is not leased and reports whether it
	// did. A row whose lease is running is being delivered: it stays, and
	// the result is false.
	CancelOutgoing(ctx context.Context, id string) (bool, error)
}

// AheadClaimer is implemented by scheduled stores that can claim rows a
// little before they fall due, for Config.Dispatcher.LookAhead: one claim
// then serves every row due within the window, and the dispatcher holds the
// rows and hands each over at its time. bustest.ScheduledMessageTests
// covers it.
//
// A type that wraps a store and changes ClaimDueOutgoing (to count or log
// claims, or to inject faults) must wrap ClaimOutgoingAhead as well, or not
// expose it: the dispatcher calls it instead of ClaimDueOutgoing.
type AheadClaimer interface {
	ScheduledStore
	// ClaimOutgoingAhead is ClaimDueOutgoing with a window: it returns up
	// to limit rows of transport claimable by now+ahead, earliest first,
	// with AvailableAt set, makes each unclaimable until now+ahead+lease,
	// and gives each a new lease token. A store with a clock of its own
	// reads now on it (see ClockedStore) and ignores the argument. It also
	// returns the now it used, so that the caller can tell how far ahead
	// of its own clock each row falls due.
	ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (AheadClaim, error)
}

// AheadClaim is the result of a look-ahead claim.
type AheadClaim struct {
	// Rows are the claimed rows, earliest first, each with AvailableAt,
	// LeaseUntil and Token set.
	Rows []OutgoingMessage
	// Now is the time the claim compared with: the store's own, read
	// during the call (never later than its return, or rows would be
	// handed over early), or the now argument for a store without a clock.
	// A row falls due AvailableAt−Now after it. It may be zero when no row
	// was claimed.
	Now time.Time
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
	ID       string // the row ID: the message ID, with a suffix for delayed retries
	Kind     Kind   // command, event or reply: how the dispatcher hands it over
	Type     string // the message type (Envelope.Type), for operators' queries
	Envelope []byte // MarshalEnvelope output
	// DueAt is when the message is due on the bus's clock. A store with a
	// clock of its own uses it only when Delay is 0 (DeliverAt).
	DueAt time.Time
	// Delay, when positive, says the row is due Delay after it is stored,
	// on the store's clock (DeliverAfter, delayed retries).
	Delay time.Duration
	// Transport is the identity of the transport the row is dispatched
	// through (TransportIdentity).
	Transport  string
	LeaseUntil time.Time // set by a claim
	Token      string    // the lease token, set by a claim
	Failures   int       // dispatch failures so far
	LastError  string    // the last dispatch failure
	// AvailableAt is when the row became claimable, before the claim that
	// returned it leased it: the due time, or the retry time after a
	// failure; on the store's clock for a ClockedStore. A look-ahead claim
	// (AheadClaimer) sets it, and the dispatcher hands the row over no
	// sooner; ClaimDueOutgoing may.
	AvailableAt time.Time
}

// Claim names a claimed row and the lease token it was claimed with.
type Claim struct {
	ID    string
	Token string
}

// Claim returns the row's ID and lease token.
func (m *OutgoingMessage) Claim() Claim { return Claim{ID: m.ID, Token: m.Token} }

// OutgoingFailure records a failed dispatch of a claimed row.
type OutgoingFailure struct {
	ID    string
	Token string // the lease token the row was claimed with
	Error string
	// RetryAfter is the backoff: a store with a clock makes the row
	// claimable again at its now + RetryAfter.
	RetryAfter time.Duration
	// RetryAt is the same instant on the bus's clock, for stores without one.
	RetryAt time.Time
}

// ClockedStore is implemented by scheduled stores with a clock of their own
// (a database's now()), on which they compare due, lease and retry times and
// compute relative ones (OutgoingMessage.Delay, OutgoingFailure.RetryAfter).
type ClockedStore interface {
	// StoreNow returns the store's current time.
	StoreNow(ctx context.Context) (time.Time, error)
}

// HandOverJoiner is implemented by scheduled stores whose claims hold a
// database transaction that a transport on the same database can write in
// (the PostgreSQL store and transport): a handed-over message is then
// queued by the same commit that deletes its row, so a hand-over is never
// both done and tried again, even when the commit's outcome is lost.
type HandOverJoiner interface {
	// JoinsHandOver reports whether t writes to this store's database and
	// joins claims' transactions. The dispatcher then claims rows as they
	// fall due, without a look-ahead window: a joined message is visible to
	// consumers only once its claim commits, which a window would delay.
	JoinsHandOver(t Transport) bool
	// HandOverContext returns ctx carrying the transaction of the claim
	// that gave its rows the lease token token, for the transport to write
	// in; ctx itself when the claim is no longer open.
	HandOverContext(ctx context.Context, token string) context.Context
}

package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidQuery is returned (wrapped) by the operations queries for
// arguments they cannot serve, such as a histogram of no buckets.
var ErrInvalidQuery = errors.New("bus: invalid query")

// MaxHistogramBuckets bounds the n of ScheduledBrowser.DueHistogram.
const MaxHistogramBuckets = 10_000

// checkHistogram validates the arguments of DueHistogram; stores call it.
func checkHistogram(width time.Duration, n int) error {
	if width <= 0 || n <= 0 || n > MaxHistogramBuckets {
		return fmt.Errorf("%w: histogram of %d buckets of %v (want 1 to %d buckets of a positive width)",
			ErrInvalidQuery, n, width, MaxHistogramBuckets)
	}
	return nil
}

// CheckHistogram returns an error wrapping ErrInvalidQuery when DueHistogram
// cannot serve width and n, for stores to call before querying.
func CheckHistogram(width time.Duration, n int) error { return checkHistogram(width, n) }

// Operations: what operators see and do through the postbus CLI and the
// web console. Persistences offer it as two optional capabilities:
// ScheduledBrowser on scheduled stores (browse, count, histogram, cancel,
// send now), and FailedStore, which keeps the messages of the error queue
// in a table where they can be grouped, searched, retried and deleted.
// bustest.ScheduledBrowserTests and bustest.FailedStoreTests define them.

// ScheduledQuery selects scheduled rows for ListScheduled. Rows come
// earliest due first, then by ID; a page continues after the last row of
// the previous one (AfterDue, AfterID: keyset paging, no OFFSET).
type ScheduledQuery struct {
	Type      string    // only rows of this message type, when not empty
	DueAfter  time.Time // only rows due at or after it, when not zero
	DueBefore time.Time // only rows due before it, when not zero
	AfterDue  time.Time // with AfterID: continue after this row
	AfterID   string
	Limit     int // at most this many rows; 0: 100
}

// ScheduledStats summarises the scheduled backlog at a time now.
type ScheduledStats struct {
	// Count is the number of rows; Estimated says it is the database's
	// estimate (a large table is not counted row by row).
	Count     int64
	Estimated bool
	// Overdue is the number of rows claimable at now (due, not leased, not
	// waiting for a dispatch retry): messages that should have been sent
	// already and that no dispatcher holds (capped at OverdueCap).
	Overdue int64
	// OldestOverdue is the due time of the overdue row claimable longest
	// (the earliest due, unless a failed dispatch deferred it); zero when
	// none.
	OldestOverdue time.Time
}

// OverdueCap bounds ScheduledStats.Overdue, so counting it stays cheap on a
// backlog that fell far behind.
const OverdueCap = 10_000

// ScheduledBrowser is implemented by scheduled stores that operators can
// browse. Every method reads or changes rows through indexes: none scans
// the whole table.
type ScheduledBrowser interface {
	ScheduledStore
	// ListScheduled returns the rows q selects, with every field of
	// OutgoingMessage (Type included).
	ListScheduled(ctx context.Context, q ScheduledQuery) ([]OutgoingMessage, error)
	// GetScheduled returns the row with the ID, and false when there is none.
	GetScheduled(ctx context.Context, id string) (OutgoingMessage, bool, error)
	// StatsScheduled summarises the backlog at now (the store's clock, for
	// stores with one).
	StatsScheduled(ctx context.Context, now time.Time) (ScheduledStats, error)
	// DueHistogram counts the rows due in each of n consecutive buckets of
	// width starting at from.
	DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error)
	// SendNow makes a row that is not leased due at once, and reports
	// whether it did: the dispatcher sends it on its next claim.
	SendNow(ctx context.Context, id string) (bool, error)
}

// FailedMessage is a message of the error queue, kept by a FailedStore.
type FailedMessage struct {
	ID       string // the message ID
	Type     string // the message type
	Endpoint string // the endpoint whose handling failed (HeaderFailureEndpoint)
	Queue    string // where a retry sends it (HeaderFailureQueue); empty: publish again
	Kind     string // handler, poison or dispatch (HeaderFailureKind)
	Reason   string // the last failure's error text (HeaderFailureReason)
	// Group identifies failures of one type at one endpoint with one
	// normalised reason (FailureGroup): ten thousand identical failures
	// are one group.
	Group    string
	Attempts int // attempts of the last failure (HeaderFailureAttempts)
	// Failures counts how often this message ID reached the error queue.
	Failures    int
	FirstFailed time.Time
	LastFailed  time.Time
	Envelope    []byte // MarshalEnvelope of the failed copy, headers included
}

// FailedGroup summarises the failures of one group.
type FailedGroup struct {
	Group       string
	Type        string
	Endpoint    string
	Reason      string // the normalised reason
	Count       int64
	FirstFailed time.Time
	LastFailed  time.Time
}

// FailedQuery selects failed messages. Messages come most recent failure
// first, then by ID; a page continues after the last message of the
// previous one (keyset paging).
type FailedQuery struct {
	Group    string // when not empty: only this group
	Type     string // when not empty: only this type
	Endpoint string // when not empty: only this endpoint
	// Search, when not empty, keeps messages whose ID equals it.
	Search       string
	BeforeFailed time.Time // with BeforeID: continue after this message
	BeforeID     string
	Limit        int // at most this many; 0: 100
}

// FailedStore keeps the messages of the error queue where operators can
// group, browse, retry (RetryFailed) and delete them. IngestFailed fills it
// from the error queue. bustest.FailedStoreTests defines the contract.
type FailedStore interface {
	Persistence
	// StoreFailed inserts the messages. A message ID already stored is a
	// new failure of it when LastFailed differs: its Failures count goes
	// up, FirstFailed keeps the earliest time, and when the new failure is
	// the latest, the stored message takes its envelope, reason, kind,
	// group, queue, attempts and LastFailed. The same LastFailed again is
	// the same failure delivered twice, and changes nothing.
	StoreFailed(ctx context.Context, msgs []FailedMessage) error
	// ListFailed returns the messages q selects.
	ListFailed(ctx context.Context, q FailedQuery) ([]FailedMessage, error)
	// CountFailed counts the messages q selects (ignoring paging and Limit).
	CountFailed(ctx context.Context, q FailedQuery) (int64, error)
	// GetFailed returns the message with the ID, and false when there is none.
	GetFailed(ctx context.Context, id string) (FailedMessage, bool, error)
	// FailedGroups returns up to limit groups (0: 100), largest first,
	// then most recent failure first, then by Group.
	FailedGroups(ctx context.Context, limit int) ([]FailedGroup, error)
	// DeleteFailed deletes the messages with the IDs and returns how many
	// it deleted.
	DeleteFailed(ctx context.Context, ids []string) (int, error)
}

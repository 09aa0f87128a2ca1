package backend

import (
	"context"
	"time"
)

// RecurringStore is implemented by persistences that keep recurring
// schedules (Bus.AddRecurring). It is a ScheduledStore, since occurrences
// are ordinary scheduled rows; bustest.RecurringTests defines the contract.
//
// A schedule's record says which definition is current (Fingerprint,
// Generation), whether it is paused, and how far its ticks have been dealt
// with (Last, Ticks). Every change that moves a schedule on goes through
// AdvanceRecurring, a compare-and-set on everything a step depends on
// (Generation, Fingerprint, Paused and Last) that also stores and cancels
// occurrences in the same step, all or nothing: of several processes that
// plan the same step, one makes it and the others find the record moved
// on, and a pause or a new definition that lands while a step is under
// way makes that step's write fail.
//
// A deleted record leaves its name's generation behind (a tombstone with
// an empty Fingerprint, which LoadRecurring and ListRecurring do not
// return), so a later declaration of the name continues from it:
// generations are never reused, and a process that still runs a
// superseded definition can never match the record again.
type RecurringStore interface {
	ScheduledStore
	// DeclareRecurring inserts the record rec.Name with rec's Fingerprint
	// and Schedule at Generation 1, unless one exists. An existing record
	// with the same Fingerprint is left as it is; one with another
	// Fingerprint (a deleted one's is empty) gets rec's Fingerprint,
	// Schedule, Spec and Due and its Generation raised by one, keeping
	// Paused, Last, Ticks, Runs and Skipped. It returns the stored record
	// and whether it inserted or replaced it. A new record gets rec's
	// Spec and Due too.
	DeclareRecurring(ctx context.Context, rec RecurringRecord) (RecurringRecord, bool, error)
	// LoadRecurring returns the record name, and false when there is none.
	LoadRecurring(ctx context.Context, name string) (RecurringRecord, bool, error)
	// ListRecurring returns every record, by name.
	ListRecurring(ctx context.Context) ([]RecurringRecord, error)
	// AdvanceRecurring applies adv if the record adv.Name still has
	// adv.Generation, adv.Fingerprint, adv.Paused and adv.From as Last,
	// and reports whether it did:
	// it cancels the rows adv.Cancel names that are not leased (as
	// CancelOutgoing), then stores adv.Store (ignoring IDs still stored,
	// as StoreOutgoing: an ID both cancelled and stored gets the new
	// row), and sets Last, Ticks, Due, Runs and Skipped, and Alive to
	// adv.Alive when that is later than the stored one (Alive never moves
	// back); all or nothing.
	// Times keep at least millisecond precision.
	AdvanceRecurring(ctx context.Context, adv RecurringAdvance) (bool, error)
	// SetRecurringPaused pauses or resumes the record name and reports
	// whether it exists (a deleted one does not). Resuming also moves Last
	// to at when it is earlier, so ticks that passed while paused are not
	// sent. Both set Due to at, so that a runtime schedule is stepped at
	// once.
	SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error)
	// DeleteRecurring removes the record name and cancels the rows
	// cancel names that are not leased, and reports whether the record
	// existed. It keeps the name's Generation as a tombstone: Fingerprint
	// and Schedule empty, not paused, Last zero, no Ticks, no Alive, no
	// Spec, no Due, Runs and Skipped zero.
	DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error)
}

// RecurringRecord is a stored schedule.
type RecurringRecord struct {
	Name string
	// Fingerprint identifies the definition: the schedule, how the message
	// is sent and the missed-tick policy.
	Fingerprint string
	// Schedule is the schedule's text, for operators.
	Schedule string
	// Generation is raised by each declaration with another Fingerprint;
	// only processes that declared the current one store occurrences.
	Generation int64
	Paused     bool
	// Last is the time up to which ticks are dealt with (stored, skipped
	// or replaced); zero before the first.
	Last time.Time
	// Ticks are recent ticks whose occurrences may still be stored,
	// ascending: the ticks ahead, and those that passed within a grace
	// period. They let a process cancel them (pause, a new definition,
	// MissedSkip) and find them after an outage.
	Ticks []time.Time
	// Alive is the liveness mark: the time through which a declaring
	// process that stepped the schedule vouches that it runs, set by each
	// step to its time plus the process's liveness span; zero before the
	// first. It only moves forward. A tick that passed after it passed
	// while no declaring process was known to run: only such ticks count
	// as missed.
	Alive time.Time
	// Spec is the definition of a schedule made at runtime
	// (Bus.SetRecurring), which any process can run from it; nil for a
	// schedule declared in code. DeclareRecurring stores it with the
	// Fingerprint.
	Spec []byte
	// Due is when a runtime schedule's next step is due
	// (RecurringRuntimeStore.ClaimDueRecurring); zero: never (paused, or
	// no tick left). DeclareRecurring sets it when it inserts or replaces
	// the record, SetRecurringPaused sets it to its at, AdvanceRecurring
	// to the advance's Due.
	Due time.Time
	// Runs counts the occurrences stored for the schedule's ticks, less
	// those cancelled (RecurringPolicy.MaxRuns); Skipped counts the ticks
	// the policies skipped. AdvanceRecurring sets both.
	Runs, Skipped int64
}

// RecurringAdvance is one step of a schedule (RecurringStore.AdvanceRecurring).
type RecurringAdvance struct {
	Name        string
	Generation  int64     // the record must still have it
	Fingerprint string    // the record must still have it
	Paused      bool      // the record must still have it
	From        time.Time // the record's Last must still be this
	Last        time.Time // the new Last
	Ticks       []time.Time
	Store       []OutgoingMessage // occurrences to store
	Cancel      []string          // IDs of occurrences to cancel unless leased
	Alive       time.Time         // the new liveness mark, kept only when later than the stored one; zero: unchanged
	Due         time.Time         // the new Due (see RecurringRecord.Due)
	Runs        int64             // the new Runs
	Skipped     int64             // the new Skipped
}

// RecurringRuntimeStore is implemented by recurring stores that run
// schedules made at runtime (Bus.SetRecurring) on every dispatcher, at a
// cost that grows with the steps due, not with the schedules stored, and
// that page through their records. bustest.RecurringTests covers it.
type RecurringRuntimeStore interface {
	RecurringStore
	// ClaimDueRecurring returns up to limit records with a Spec whose Due
	// is set and not after now, earliest Due first, and moves their Due to
	// now plus lease, atomically, so that of several dispatchers one steps
	// each record; a dispatcher that dies holding one leaves it to
	// another after the lease.
	ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]RecurringRecord, error)
	// ListRecurringPage returns up to limit records whose names start with
	// prefix and sort after after (byte order), by name.
	ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]RecurringRecord, error)
}

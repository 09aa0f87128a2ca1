package sqlstore

import (
	"context"
	"time"

	"github.com/postbus/bus/backend"
)

// RecurringSQL are the statements of Recurrings. Those that return
// records return these columns, in order: name, fingerprint, schedule,
// generation, paused, last_tick, ticks, alive_until, spec, due_at, runs,
// skipped, and whether spec is set (spec IS NOT NULL), so that an empty
// Spec is not read as none. Times are parameters as the Dialect's Times
// codec makes them; the nullable ones (last_tick, alive_until, due_at)
// take NULL for the zero time where RecurringHooks.NullZero says so.
// Text parameters (names, fingerprints, run IDs) go through Dialect.T.
type RecurringSQL struct {
	// Load returns the live record (fingerprint not empty) of (name).
	Load string
	// List returns every live record, by name.
	List string
	// Lock returns the fingerprint of the record of (name), a tombstone's
	// too, and locks its row until the transaction ends.
	Lock string
	// Insert inserts the record of (name, fingerprint, schedule, spec,
	// due_at) at generation 1, not paused, with no last_tick, ticks or
	// alive_until, runs and skipped 0.
	Insert string
	// Replace sets the definition of the record: of (fingerprint,
	// schedule, spec, due_at, name), it sets the first four and raises
	// the generation by one.
	Replace string
	// Advance is a step's compare-and-set, which keeps a step that a
	// pause, a new definition or another step overtook from writing: of
	// (last_tick, ticks, alive_until, due_at, runs, skipped, name,
	// generation, from, fingerprint, paused), it sets the first six of
	// the record whose name, generation, last_tick (from; NULL matches
	// NULL), fingerprint and paused are the last five, alive_until only
	// when the new one is later (the zero time keeps it). A row affected:
	// the step is made.
	Advance string
	// SetPaused of (paused, at, name) sets paused and due_at to at on the
	// live record; a resume (paused false) also moves last_tick to at
	// when it is earlier or none. A row affected: the record exists.
	SetPaused string
	// Delete of (name) turns the live record into its tombstone:
	// fingerprint and schedule empty, not paused, no last_tick, ticks,
	// alive_until, spec or due_at, runs and skipped 0; the generation
	// stays. A row affected: the record existed.
	Delete string

	// Claim, when set, claims the runtime records (spec set, live) due in
	// one statement: of (now, due, limit), it returns at most limit
	// records whose due_at is set and not after now, earliest first,
	// skipping those another claim holds, with the due_at they had, and
	// moves their due_at to due. Otherwise a transaction runs
	// ClaimSelect, then ClaimMove.
	Claim string
	// ClaimProbe, when set, returns 0 when no runtime record is due at
	// (now), so that a claim with nothing to do starts no transaction.
	ClaimProbe string
	// ClaimSelect returns the runtime records due at (now), at most
	// (limit), earliest due_at first then by name, and locks them
	// (skipping, not waiting for, those another claim holds).
	ClaimSelect string
	// ClaimMove sets due_at of the records named: the kit appends the
	// list "(?, ?, …)" of the names to it, and the parameters are (due,
	// name, name, …).
	ClaimMove string
	// Page returns the live records named after (after) and from
	// (prefix) on, by name (byte order), at most (limit).
	Page string
	// PageBefore is Page with a bound: of (after, prefix, end, limit),
	// the names are also before end.
	PageBefore string

	// RunBegin, when set, begins a run in one statement: of (name, id,
	// until, now), it inserts the run (name, id, until), or takes over
	// the one stored for name when it is id's or its until is not after
	// now. A row affected: begun. Otherwise a transaction runs RunLock,
	// then RunInsert or RunTake.
	RunBegin string
	// RunLock returns the run_id and run_until of (name) and locks the
	// row until the transaction ends.
	RunLock string
	// RunInsert inserts the run (name, id, until); a unique-key violation
	// means another run began first.
	RunInsert string
	// RunTake of (id, until, name) sets the run of name.
	RunTake string
	// RunEnd of (name, id) deletes the run of name if it is id's.
	RunEnd string
}

// RecurringHooks are what Recurrings needs of the rest of the store, and
// of the database, beside statements.
type RecurringHooks struct {
	// Check refuses occurrences that the store cannot store (an empty ID,
	// no envelope…); its error is returned as it is. Nil: none.
	Check func(rows []backend.OutgoingMessage) error
	// Write cancels, in tx, the rows of the scheduled-message table that
	// cancel names and that no claim holds (as CancelOutgoing), then
	// stores rows (as StoreOutgoing, ignoring IDs still stored). It is
	// called only when there is something to do.
	Write func(ctx context.Context, tx Tx, cancel []string, rows []backend.OutgoingMessage) error
	// Ticks carries a record's Ticks. Nil: a JSON array of the integers
	// of the Dialect's Times (a UnixTimes).
	Ticks TickCodec
	// NullZero makes the zero time NULL in the nullable time columns
	// (last_tick, alive_until, due_at) instead of the Times codec's zero.
	NullZero bool
	// Schedule converts the schedule's text. Nil: the string as it is.
	Schedule func(s string) any
	// Page, when set, makes the statement and parameters of
	// ListRecurringPage instead of Page and PageBefore.
	Page func(prefix, after string, limit int) (string, []any)
}

// TickCodec is how a database stores a record's Ticks.
type TickCodec interface {
	// Arg is the parameter of ticks (none: an empty list, not NULL).
	Arg(ticks []time.Time) any
	// Scan reads the column scanned into an any; an empty list is nil.
	Scan(src any) ([]time.Time, error)
}

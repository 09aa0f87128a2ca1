package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus/backend"
)

// Complete is every interface a SQL store of this repository implements;
// each asserts it at compile time: var _ sqlstore.Complete = (*Persistence)(nil).
type Complete interface {
	backend.Persistence
	backend.ScheduledStore
	backend.DueNotifier
	backend.ClockedStore
	backend.AheadClaimer
	backend.OutboxStore
	backend.SagaStore
	backend.TxCanceler
	backend.PoolReporter
	backend.Pinger
	backend.TxCarrier
	backend.ScheduledBrowser
	backend.FailedStore
	backend.RecurringStore
	backend.RecurringRuntimeStore
}

// ScheduledSQL is the statements of the scheduled store's single-row
// writes and reads. Text parameters go through Dialect.T, times through
// Dialect.Times.
type ScheduledSQL struct {
	// NextDue takes the transport (NextDueArgs times; 0: once) and
	// returns one time column: the earliest available_at of the rows of
	// that transport or stored without one, NULL when there is none.
	NextDue     string
	NextDueArgs int
	// Cancel deletes the row whose ID is the first parameter when no
	// claim holds it (with a client clock, the second is now: a lease
	// that runs past it holds the row); it never waits for a lock.
	Cancel string
	// CancelLock, if set, runs before Cancel in one transaction: it
	// takes the ID, and returns a row when it could lock the row at once
	// (no claim holds it). Cancel then deletes it unconditionally.
	CancelLock string
	// Count returns the number of stored rows.
	Count string
	// Now returns the server's clock, the one every due, lease and retry
	// time is compared on. Empty: Scheduled's Clock.
	Now string
}

// ScheduledConfig is what a store gives Scheduled beside its statements.
type ScheduledConfig struct {
	// Noun follows the operation in errors: " outgoing" makes
	// "postgres: store outgoing: …". Empty: "mysql: store: …".
	Noun string
	// Clock is the store's clock when it has no server clock (SQL.Now
	// empty): SQLite's file lives on this machine.
	Clock func() time.Time
	// ValidID reports an ID the database's text columns can key (nil:
	// any). A row with another is refused; a cancel of one matches none.
	ValidID func(id string) bool
	// Invalid is the error of a row StoreOutgoing refuses: its index in
	// the call, its ID, and the reason ("empty ID", "no envelope", …).
	Invalid func(i int, id, reason string) error
	// Check refuses rows the database cannot take before any is stored
	// (MySQL's max_allowed_packet). Nil: none.
	Check func(ctx context.Context, rows []backend.OutgoingMessage) error
	// Store stores rows, all or none: a Grouper's Store, or a
	// transaction of the call's own.
	Store func(ctx context.Context, rows []backend.OutgoingMessage) error
	// Bulk, if set, stores a call of BulkMin rows or more instead
	// (PostgreSQL's COPY).
	Bulk    func(ctx context.Context, rows []backend.OutgoingMessage) error
	BulkMin int
	// InDoubt reports an error of Store after which the rows may be
	// stored or not: the connection ended after the commit may have
	// reached the server (see InDoubt). Nil: never.
	InDoubt func(err error) bool
	// IDs is the in-doubt check's query of which of ids (at most 1,000)
	// are stored, and its parameters: it returns one column, the IDs.
	IDs func(ids []string) (query string, args []any)
	// Watch is how WatchDue polls; Claimers the transports it polls for.
	Watch    Watch
	Claimers *Claimers
	// Log receives the warning of an in-doubt store that was stored.
	Log *slog.Logger
}

// Scheduled is the write side of a scheduled store: StoreOutgoing with
// its row checks and in-doubt commits, CancelOutgoing, NextDueOutgoing,
// WatchDue, Len and StoreNow. Claims and settlements are elsewhere.
type Scheduled struct {
	d   *Dialect
	db  DB
	sql ScheduledSQL
	c   ScheduledConfig
}

// NewScheduled returns the write side of a scheduled store on db.
func NewScheduled(d *Dialect, db DB, sql ScheduledSQL, c ScheduledConfig) *Scheduled {
	if c.Claimers == nil {
		c.Claimers = &Claimers{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return &Scheduled{d: d, db: db, sql: sql, c: c}
}

func (s *Scheduled) errorf(op string, err error) error {
	return s.d.Errorf("%s%s: %w", op, s.c.Noun, err)
}

// StoreOutgoing stores rows all or none; an ID that is already stored
// keeps its row, so a retried send cannot schedule twice. A row with a
// positive Delay is due Delay after the store's now at the statement;
// otherwise at its DueAt. Each row keeps its Transport. A row with an
// empty ID, an ID the store cannot key, or no envelope fails the call
// before anything is stored. IDs compare byte for byte. When the
// connection fails before the commit is confirmed, the call checks on
// another connection whether its rows were stored and returns nil if they
// all were (see InDoubt).
func (s *Scheduled) StoreOutgoing(ctx context.Context, msgs []backend.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	if err := CheckRows(msgs, s.c.ValidID, s.c.Invalid); err != nil {
		return err
	}
	if s.c.Check != nil {
		if err := s.c.Check(ctx, msgs); err != nil {
			return s.errorf("store", err)
		}
	}
	store := s.c.Store
	if s.c.Bulk != nil && len(msgs) >= s.c.BulkMin {
		store = s.c.Bulk
	}
	err := store(ctx, msgs)
	if err != nil && s.c.InDoubt != nil && s.c.InDoubt(err) && ctx.Err() == nil {
		err = s.settleInDoubt(ctx, msgs, err, store)
	}
	if err != nil {
		return s.errorf("store", err)
	}
	return nil
}

// CheckRows refuses the first row that cannot be stored: an empty ID,
// an ID validID refuses (nil: none), or no envelope; invalid makes the
// error.
func CheckRows(msgs []backend.OutgoingMessage, validID func(string) bool, invalid func(i int, id, reason string) error) error {
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.ID == "":
			return invalid(i, m.ID, "empty ID")
		case validID != nil && !validID(m.ID):
			return invalid(i, m.ID, "ID is not valid UTF-8 text without NUL bytes")
		case m.Envelope == nil:
			return invalid(i, m.ID, "no envelope")
		}
	}
	return nil
}

// TextID reports whether id is valid UTF-8 without NUL bytes: what a text
// column (PostgreSQL's, SQLite's JSON lists of IDs) carries byte for byte.
func TextID(id string) bool { return utf8.ValidString(id) && strings.IndexByte(id, 0) < 0 }

// CancelOutgoing removes a row that no claim holds, and reports whether
// it did. A row a claim holds is being delivered: it stays, and the
// result is false, at once (the row's lock is never waited for). So is a
// row leased by a process of an earlier version whose lease runs.
func (s *Scheduled) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	if s.c.ValidID != nil && !s.c.ValidID(id) {
		return false, nil // no stored row has it
	}
	args := []any{s.d.T(id)}
	if s.sql.Now == "" {
		args = append(args, s.d.Times.Arg(s.c.Clock()))
	}
	var n int64
	var err error
	if s.sql.CancelLock == "" {
		n, err = s.db.Exec(ctx, s.sql.Cancel, args...)
	} else {
		err = s.inTx(ctx, func(tx Tx) error {
			var one int
			n = 0
			if err := tx.QueryRow(ctx, s.sql.CancelLock, args...).Scan(&one); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return nil // held: being delivered
				}
				return err
			}
			var err error
			n, err = tx.Exec(ctx, s.sql.Cancel, args...)
			return err
		})
	}
	if err != nil {
		return false, s.errorf("cancel", err)
	}
	return n > 0, nil
}

// NextDueOutgoing returns when the earliest row of transport (or stored
// without a transport) becomes claimable, and false when there is none:
// one probe of the claim index per transport value. It notes transport
// for WatchDue.
func (s *Scheduled) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	s.c.Claimers.Note(transport)
	t, ok, err := s.nextDue(ctx, transport)
	if err != nil {
		return time.Time{}, false, s.errorf("next due", err)
	}
	return t, ok, nil
}

func (s *Scheduled) nextDue(ctx context.Context, transport string) (time.Time, bool, error) {
	args := slices.Repeat([]any{s.d.T(transport)}, max(s.sql.NextDueArgs, 1))
	var next any
	if err := s.db.QueryRow(ctx, s.sql.NextDue, args...).Scan(&next); err != nil {
		return time.Time{}, false, err
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	t, err := s.d.ScanTime(next)
	return t, err == nil, err
}

// Len returns the number of stored rows, leased or not.
func (s *Scheduled) Len(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, s.sql.Count).Scan(&n); err != nil {
		return 0, s.errorf("count", err)
	}
	return n, nil
}

// StoreNow returns the store's clock, the one every due, lease and retry
// time is compared on (bus.ClockedStore): the server's, or for a store
// without one the clock of the machine its file is on.
func (s *Scheduled) StoreNow(ctx context.Context) (time.Time, error) {
	if s.sql.Now == "" {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		return s.c.Clock(), nil
	}
	var now any
	if err := s.db.QueryRow(ctx, s.sql.Now).Scan(&now); err != nil {
		return time.Time{}, s.d.Errorf("store now: %w", err)
	}
	return s.d.ScanTime(now)
}

// inTx runs fn in a transaction of db (InTx).
func (s *Scheduled) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return InTx(ctx, s.d, s.db, fn)
}

// CeilMicros is d in whole microseconds, rounded up so that a positive
// duration (a delay, a lease) never becomes zero; 0 for one that is not
// positive.
func CeilMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

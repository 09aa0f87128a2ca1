package mysql

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/postbus/bus/backend/sqlstore"
)

// Defaults for the zero values of Options.
const (
	DefaultTable         = "outgoing_messages"
	DefaultWatchInterval = 100 * time.Millisecond
	DefaultIsolation     = sql.LevelReadCommitted
)

// maxIdentifierLen is MySQL's and MariaDB's limit on table names.
const maxIdentifierLen = 64

// Suffixes of the tables named after Options.Table. The longest one bounds
// the length of Table.
const (
	inboxSuffix     = "_inbox"
	sagaSuffix      = "_sagas"
	failedSuffix    = "_failed"
	recurringSuffix = "_recurring"
)

// ErrInvalidOptions is wrapped by every *OptionsError.
var ErrInvalidOptions = errors.New("mysql: invalid options")

// ErrNilDB is returned by New when it is given no *sql.DB.
var ErrNilDB = errors.New("mysql: nil *sql.DB")

// OptionsError reports a bad field of Options.
type OptionsError struct {
	Field  string // "Table", "WatchInterval" or "Isolation"
	Reason string
}

// Error describes the failure.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("mysql: invalid options: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// Options configures New. Every zero value means the documented default.
type Options struct {
	// Table names the scheduled-message table, in the database the
	// connections use (the DSN's database). The other tables are named
	// after it: Table + "_inbox" (the outbox's inbox), Table + "_sagas",
	// Table + "_failed" (bus.FailedStore) and Table + "_recurring"
	// (bus.RecurringStore). Letters, digits and underscores, not starting
	// with a digit, at most 54 bytes; always quoted. Default:
	// DefaultTable ("outgoing_messages").
	Table string
	// WatchInterval is how often WatchDue asks the database for the next
	// due time of the transports this store's dispatchers claim for (one
	// indexed MIN per transport), so that rows stored by other processes
	// wake this one's dispatcher within about this long. Negative turns
	// the watch off: dispatchers then find such rows on their poll
	// (bus.DispatcherConfig.PollInterval). Default: DefaultWatchInterval
	// (100 ms).
	WatchInterval time.Duration
	// Isolation is the isolation level of the outbox's handling
	// transactions (BeginHandling), in which handlers run their own
	// queries (Tx). The store's own transactions always run at READ
	// COMMITTED, which takes no gap locks. Default: DefaultIsolation
	// (sql.LevelReadCommitted); sql.LevelRepeatableRead is the server's
	// default.
	Isolation sql.IsolationLevel
	// Logger receives the store's few log lines. Default: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.WatchInterval = cmp.Or(o.WatchInterval, DefaultWatchInterval)
	o.Isolation = cmp.Or(o.Isolation, DefaultIsolation)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	if r := sqlstore.CheckName(o.Table, maxIdentifierLen-len(recurringSuffix)); r != "" {
		return &OptionsError{Field: "Table", Reason: fmt.Sprintf("%q: %s", o.Table, r)}
	}
	switch o.Isolation {
	case sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default:
		return &OptionsError{Field: "Isolation", Reason: fmt.Sprintf("%v is not a level MySQL has", o.Isolation)}
	}
	return nil
}

// names are the quoted table names of one Options.Table.
type names struct {
	raw, table, inbox, sagas, failed, recurring, runs string
}

func newNames(table string) names {
	q := func(s string) string { return "`" + s + "`" } // validated: no backquote can occur
	return names{raw: table, table: q(table), inbox: q(table + inboxSuffix), sagas: q(table + sagaSuffix),
		failed: q(table + failedSuffix), recurring: q(table + recurringSuffix), runs: q(table + runsSuffix)}
}

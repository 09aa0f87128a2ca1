package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/postbus/bus/backend/sqlstore"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

var _ sqlstore.Complete = (*Persistence)(nil)

// Defaults for the zero values of Options.
const (
	DefaultBusyTimeout   = 5 * time.Second
	DefaultTable         = "outgoing_messages"
	DefaultWatchInterval = 100 * time.Millisecond
)

// ErrInvalidOptions is wrapped by every *OptionsError.
var ErrInvalidOptions = errors.New("sqlite: invalid options")

// OptionsError reports a bad argument to Open.
type OptionsError struct {
	Field  string // "path", "BusyTimeout" or "Table"
	Reason string
}

// Error describes the failure.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("sqlite: invalid options: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// Options configures Open. Every zero value means the documented default.
type Options struct {
	// BusyTimeout is how long a statement waits for another process's write
	// lock on the file before it fails with SQLITE_BUSY.
	// Default: DefaultBusyTimeout (5 s).
	BusyTimeout time.Duration
	// Table names the scheduled-message table; its index is named after it.
	// Letters, digits and underscores only. Default: DefaultTable
	// ("outgoing_messages").
	Table string
	// WatchInterval is how often WatchDue checks whether another process
	// committed to the file (PRAGMA data_version, a cheap read), so that
	// dispatchers wake for rows other processes store. Negative disables
	// watching. Default: DefaultWatchInterval (100 ms).
	WatchInterval time.Duration
	// Logger receives the store's few log lines. Default: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.BusyTimeout = cmp.Or(o.BusyTimeout, DefaultBusyTimeout)
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.WatchInterval = cmp.Or(o.WatchInterval, DefaultWatchInterval)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	if o.BusyTimeout < 0 {
		return &OptionsError{Field: "BusyTimeout", Reason: "must not be negative"}
	}
	if r := sqlstore.CheckName(o.Table, 63); r != "" {
		return &OptionsError{Field: "Table", Reason: fmt.Sprintf("%q is not a plain SQL identifier: %s", o.Table, r)}
	}
	return nil
}

// Persistence is a durable bus.Persistence and bus.ScheduledStore kept in
// one SQLite database file. It is safe for concurrent use, and several
// processes may open the same file (see the package documentation).
type Persistence struct {
	db     *sql.DB
	path   string
	log    *slog.Logger
	q      queries
	memory bool

	file   string      // the main database's file as SQLite names it, to recognise a caller's transaction
	stored atomic.Bool // rows stored in a caller's transaction since WatchDue last looked

	// sagas is the saga store (saga.go).
	*sagas
	// outbox is the outbox and inbox (outbox.go).
	*outbox
	*recurrings // the recurring store (recurring.go)
	*failed     // the failed-message store (failed.go)
	*browser    // listing scheduled rows (browse.go)
	// scheduled is the scheduled store's writes: StoreOutgoing
	// (storeRows), CancelOutgoing, NextDueOutgoing, WatchDue, Len and
	// StoreNow (the clock of the machine the file is on: every process
	// that opens it reads the same one).
	*scheduled
	claimers *sqlstore.Claimers
	dialect  *sqlstore.Dialect // what SQLite makes different for the kit (dialect.go)
	*settler                   // settles claimed rows (settle.go)
}

type scheduled = sqlstore.Scheduled

// noteTransport remembers that a dispatcher of transport uses this
// Persistence, so that WatchDue wakes it for that transport's rows.
func (p *Persistence) noteTransport(transport string) { p.claimers.Note(transport) }

// watchChanges is WatchDue's look for commits (sqlstore.Watch): PRAGMA
// data_version changes when another connection has committed. Commits of
// this Persistence do not count (the bus wakes its own dispatcher for
// those) except rows stored in a caller's transaction (WithTx), whose
// commit the bus does not see and which do not change data_version:
// StoreOutgoingInCallerTx flags them. The query waits for such a
// transaction to end, if it is still open (the pool holds one
// connection).
func (p *Persistence) watchChanges() func(ctx context.Context) (bool, error) {
	last := int64(-1)
	return func(ctx context.Context) (bool, error) {
		var version int64
		if err := p.db.QueryRowContext(ctx, "PRAGMA data_version").Scan(&version); err != nil {
			return false, err
		}
		changed := p.stored.Swap(false) || (last >= 0 && version != last)
		last = version
		return changed, nil
	}
}

// Open opens (creating if needed) the SQLite database at path, switches it
// to WAL mode and sets the busy timeout. It does not create the table: call
// Setup, or let bus.Start call it. Close releases the file.
//
// The path ":memory:" gives a private in-memory database, useful in tests;
// its Durable reports false.
func Open(path string, opts Options) (*Persistence, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, &OptionsError{Field: "path", Reason: "empty"}
	}
	if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
		return nil, &OptionsError{Field: "path", Reason: fmt.Sprintf("%q: give a plain file path, without a URI scheme, '?' or '#'", path)}
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	// NORMAL is the documented pairing with WAL: a commit is durable
	// against a process crash; an OS crash or power loss may roll back the
	// last transactions but never corrupts the file.
	q.Add("_pragma", "synchronous(NORMAL)")
	// Every explicit transaction takes the write lock up front, so it
	// waits on the busy timeout instead of failing when it upgrades.
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection: writers in this process queue in database/sql
	// instead of spinning on SQLITE_BUSY, and a ":memory:" database lives
	// as long as the Persistence.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)

	ctx, cancel := context.WithTimeout(context.Background(), opts.BusyTimeout+5*time.Second)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	var file string
	if err := db.QueryRowContext(ctx, queryFile).Scan(&file); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	memory := path == ":memory:"
	if !memory && !strings.EqualFold(mode, "wal") {
		opts.Logger.Warn("sqlite: database is not in WAL mode; readers and writers will block each other",
			"path", path, "journal_mode", mode)
	}
	opts.Logger.Debug("sqlite: opened", "path", path, "journal_mode", mode)
	p := &Persistence{db: db, path: path, log: opts.Logger, q: newQueries(opts.Table), memory: memory, file: file, claimers: &sqlstore.Claimers{}}
	d, kit := newDialect(), sqlstore.FromDB(db, nil)
	p.scheduled = sqlstore.NewScheduled(d, kit, sqlstore.ScheduledSQL{
		NextDue: p.q.nextDue, Cancel: p.q.cancelOne, Count: p.q.countRows,
	}, sqlstore.ScheduledConfig{
		Clock:    p.now,
		ValidID:  sqlstore.TextID,
		Invalid:  invalidRow,
		Store:    p.storeRows,
		Watch:    sqlstore.Watch{Interval: opts.WatchInterval, Changes: p.watchChanges},
		Claimers: p.claimers,
		Log:      opts.Logger,
	})
	p.dialect = d
	p.settler = newSettler(p)
	sagaSQL := p.q.sagas.sql
	sagaSQL.Now = p.now
	p.sagas = sqlstore.NewSagas(d, kit, sagaSQL)
	p.outbox = newOutbox(p, d)
	p.recurrings = p.newRecurrings()
	p.failed = sqlstore.NewFailed(d, kit, newFailedSQL(opts.Table+"_failed"))
	p.browser = sqlstore.NewBrowser(d, kit, newBrowseSQL(opts.Table))
	return p, nil
}

// Close closes the database. Calls after Close fail.
func (p *Persistence) Close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// Durable reports true for a database file: rows survive a restart of the
// process. It is false for ":memory:".
func (p *Persistence) Durable() bool { return !p.memory }

// Ping checks that the database file answers (bus.Pinger, for
// Bus.Health): it waits for a free connection within ctx.
func (p *Persistence) Ping(ctx context.Context) error { return p.db.PingContext(ctx) }

// DB returns the underlying handle, for inspection and backups. Its pool
// holds a single connection; do not change the pool settings.
func (p *Persistence) DB() *sql.DB { return p.db }

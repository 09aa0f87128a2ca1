package mysql

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var _ sqlstore.Complete = (*Persistence)(nil)

// Persistence is the durable MySQL/MariaDB store: scheduled messages, the
// transactional outbox and inbox, sagas, recurring schedules and failed
// messages. It is safe for concurrent use by many goroutines and by many
// processes sharing the tables. Make one with New; the caller owns the
// *sql.DB and closes it after the buses using this value have stopped.
// Between calls it holds only the connections of open claims, whose
// transactions keep the claimed rows locked until they are settled
// (claims.go); Close rolls them back.
type Persistence struct {
	db   *sql.DB
	opts Options
	n    names
	q    statements
	log  *slog.Logger
	// scheduled is the scheduled store's writes: StoreOutgoing (group
	// commit of flushRows), CancelOutgoing, NextDueOutgoing, WatchDue,
	// Len and StoreNow.
	*scheduled
	claimers *sqlstore.Claimers
	// packetLimit is the server's max_allowed_packet, read by Setup (or
	// the first store); 0 until read (packet.go).
	packetLimit atomic.Int64
	// dialect is what MySQL makes different for the kit (dialect.go).
	dialect *sqlstore.Dialect
	// claims are the open claim transactions, by token (claims.go).
	claims *lockedClaims
	*settler
	// serverIdle is the idleMode of the server, once known.
	serverIdle atomic.Int32
	// sagas is the saga store (saga.go).
	*sagas
	// outbox is the outbox and inbox (outbox.go).
	*outbox

	mu     sync.Mutex
	origin string // the database and server of p.db, for checkTx; empty until read

	*recurrings // the recurring store (recurring.go)
	*failed     // the failed-message store (failed.go)
	*browser    // listing scheduled rows (browse.go)
}

type scheduled = sqlstore.Scheduled

// Group commit of StoreOutgoing: every autocommitted INSERT pays a redo
// log flush (innodb_flush_log_at_trx_commit=1), so the rows of concurrent
// calls share INSERTs: at most groupInFlight at once, of groupRows rows,
// each on no caller's context but one of groupTimeout.
const (
	groupInFlight = 2
	groupRows     = 2000
	groupTimeout  = time.Minute
)

// New returns a Persistence on db, configured by opts (zero values mean
// the documented defaults). It does not touch the database: call Setup
// (the bus does at Start) or run Migrations yourself. The store compares
// and computes every time on the server's UTC clock (UTC_TIMESTAMP(6)),
// and reads and writes times as microseconds since the Unix epoch, so
// neither the session's time zone nor the DSN's parseTime and loc
// settings matter.
func New(db *sql.DB, opts Options) (*Persistence, error) {
	if db == nil {
		return nil, ErrNilDB
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	n := newNames(opts.Table)
	p := &Persistence{db: db, opts: opts, n: n, q: newStatements(n), log: opts.Logger, claimers: &sqlstore.Claimers{}}
	// An ID already stored keeps its row (ON DUPLICATE KEY UPDATE id =
	// id), and so does one a claim holds, without waiting for the claim;
	// a row that cannot fit in one INSERT under max_allowed_packet is a
	// *RowTooLargeError (packet.go); a Delay counts from UTC_TIMESTAMP(6).
	d, kit := newDialect(), sqlstore.FromDB(db, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	p.scheduled = sqlstore.NewScheduled(d, kit,
		p.q.scheduled, sqlstore.ScheduledConfig{
			Invalid: invalidRow,
			Check:   p.checkSizes,
			Store:   sqlstore.NewGrouper(groupRows, groupInFlight, groupTimeout, p.flushRows).Store,
			InDoubt: inDoubt,
			IDs: func(ids []string) (string, []any) {
				return "SELECT id FROM " + n.table + " WHERE id IN " + inList(len(ids)), binaryIDs(ids)
			},
			Watch:    sqlstore.Watch{Interval: opts.WatchInterval},
			Claimers: p.claimers,
			Log:      opts.Logger,
		})
	p.dialect = d
	p.claims, p.settler = newClaims(p)
	p.sagas = sqlstore.NewSagas(d, sqlstore.FromDB(db, nil), sagaSQL(n))
	p.outbox = newOutbox(p, d)
	p.recurrings = p.newRecurrings()
	p.failed = sqlstore.NewFailed(d, kit, newFailedSQL(n.failed))
	p.browser = sqlstore.NewBrowser(d, kit, newBrowseSQL(n.table))
	return p, nil
}

// Durable reports true: rows survive restarts of the process and of the
// database.
func (p *Persistence) Durable() bool { return true }

// Ping checks that the server answers (bus.Pinger, for Bus.Health): it
// waits for a free connection of the pool within ctx.
func (p *Persistence) Ping(ctx context.Context) error { return p.db.PingContext(ctx) }

// DB returns the handle the store uses.
func (p *Persistence) DB() *sql.DB { return p.db }

// Table returns the quoted name of the scheduled-message table.
func (p *Persistence) Table() string { return p.n.table }

// InboxTable returns the quoted name of the inbox table.
func (p *Persistence) InboxTable() string { return p.n.inbox }

// ConnectionPool describes db's pool for bus.Start's check: its
// MaxOpenConnections (0, the database/sql default, is unlimited and
// skips the check). WatchDue holds no connection between its polls.
func (p *Persistence) ConnectionPool(bus.Transport) bus.ConnectionPool {
	return bus.ConnectionPool{MaxConns: p.db.Stats().MaxOpenConnections}
}

// noteTransport remembers that a dispatcher of transport uses this
// Persistence, so that WatchDue wakes it for that transport's rows.
func (p *Persistence) noteTransport(transport string) { p.claimers.Note(transport) }

// binaryIDs are ids as parameters of the binary id column.
func binaryIDs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = []byte(id)
	}
	return args
}

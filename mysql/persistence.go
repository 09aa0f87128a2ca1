package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var (
	_ bus.Persistence    = (*Persistence)(nil)
	_ bus.ScheduledStore = (*Persistence)(nil)
	_ bus.DueNotifier    = (*Persistence)(nil)
	_ bus.ClockedStore   = (*Persistence)(nil)
	_ bus.AheadClaimer   = (*Persistence)(nil)
	_ bus.OutboxStore    = (*Persistence)(nil)
	_ bus.SagaStore      = (*Persistence)(nil)
	_ bus.TxCanceler     = (*Persistence)(nil)
	_ bus.PoolReporter   = (*Persistence)(nil)
	_ bus.Pinger         = (*Persistence)(nil)
)

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
	// group shares INSERTs among concurrent StoreOutgoing calls (group.go).
	group *grouper
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

	mu         sync.Mutex
	transports map[string]struct{} // the transports claimed for through this value, for WatchDue
	origin     string              // the database and server of p.db, for checkTx; empty until read
}

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
	p := &Persistence{db: db, opts: opts, n: n, q: newStatements(n), log: opts.Logger,
		transports: map[string]struct{}{}}
	p.group = &grouper{flush: p.flushRows}
	p.dialect = newDialect()
	p.claims, p.settler = newClaims(p)
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

// SagaTable returns the quoted name of the saga table.
func (p *Persistence) SagaTable() string { return p.n.sagas }

// StoreNow returns the server's clock, UTC_TIMESTAMP(6): the clock every
// due, lease and retry time is compared on.
func (p *Persistence) StoreNow(ctx context.Context) (time.Time, error) {
	var now int64
	if err := p.db.QueryRowContext(ctx, "SELECT "+us("UTC_TIMESTAMP(6)")).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("mysql: store now: %w", err)
	}
	return fromMicros(now), nil
}

// ConnectionPool describes db's pool for bus.Start's check: its
// MaxOpenConnections (0, the database/sql default, is unlimited and
// skips the check). WatchDue holds no connection between its polls.
func (p *Persistence) ConnectionPool(bus.Transport) bus.ConnectionPool {
	return bus.ConnectionPool{MaxConns: p.db.Stats().MaxOpenConnections}
}

// noteTransport remembers that a dispatcher of transport uses this
// Persistence, so that WatchDue wakes it for that transport's rows.
func (p *Persistence) noteTransport(transport string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transports[transport] = struct{}{}
}

// claimers returns the transports noted by noteTransport.
func (p *Persistence) claimers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.transports))
	for t := range p.transports {
		out = append(out, t)
	}
	return out
}

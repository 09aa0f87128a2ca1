package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbus/bus/backend/sqlstore"
)

var _ sqlstore.Complete = (*Persistence)(nil)

type scheduled = sqlstore.Scheduled

// Persistence is the durable PostgreSQL scheduled-message store. It is safe
// for concurrent use by many goroutines and by many processes sharing one
// table. Make one with New; the caller owns the pool and closes it after the
// buses using this value have stopped. Claims run on connections of their
// own, opened with the pool's configuration and kept beside it (at most
// half the pool's MaxConns, at least two), each held until its claim is
// settled or its lease lapses; RollbackClaims ends the claims and closes
// those connections.
type Persistence struct {
	pool  *pgxpool.Pool
	opts  Options
	names names
	log   *slog.Logger
	sql   statements
	// staged is the SQL of bulk inserts through a staging table (copy.go).
	staged stagedStatements
	// sagas is the saga store (saga.go).
	*sagas
	// outbox is the outbox and inbox (outbox.go).
	*outbox
	// scheduled is the scheduled store's writes: StoreOutgoing (grouped
	// INSERTs, or COPY for a bulk call: copy.go), CancelOutgoing,
	// NextDueOutgoing, Len and StoreNow. WatchDue is LISTEN (notify.go).
	*scheduled
	// dialect is what PostgreSQL makes different for the kit (kit.go).
	dialect *sqlstore.Dialect
	// claims holds the open claims and bounds them, on conns (claims.go).
	claims *lockedClaims
	conns  *claimConns
	*settler

	*recurrings // the recurring store (recurring.go)
	*failed     // the failed-message store (failed.go)
	*browser    // listing scheduled rows (browse.go)
}

// New returns a Persistence on pool, configured by opts (zero values mean
// the documented defaults). It does not touch the database: call Setup (the
// bus does at Start) or run Migrations yourself. An invalid schema or table
// name is a *NameError.
func New(pool *pgxpool.Pool, opts Options) (*Persistence, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &Persistence{pool: pool, opts: opts, names: newNames(opts), log: opts.Logger}
	p.sql = newStatements(p.names, !opts.DisableNotify)
	p.staged = newStagedStatements(p.names, !opts.DisableNotify)
	d, kit := newDialect(), newKitDB(pool)
	p.sagas = sqlstore.NewSagas(d, kit, sagaSQL(p.names))
	p.outbox = newOutbox(p, d)
	p.scheduled = sqlstore.NewScheduled(d, kit, sqlstore.ScheduledSQL{
		NextDue: p.sql.nextDue, Cancel: p.sql.cancel, Now: p.sql.now, Count: "SELECT count(*) FROM " + p.names.table,
	}, sqlstore.ScheduledConfig{
		Noun:    " outgoing",
		ValidID: storableID,
		Invalid: invalidRow,
		Store:   sqlstore.NewGrouper(opts.MaxBatchRows, opts.MaxConcurrentInserts, 0, p.insert).Store,
		Bulk:    p.storeCopied,
		BulkMin: copyMinRows,
		InDoubt: inDoubt,
		IDs: func(ids []string) (string, []any) {
			return "SELECT id FROM " + p.names.table + " WHERE id = ANY($1)", []any{ids}
		},
		Log: opts.Logger,
	})
	p.dialect = d
	p.conns = &claimConns{cfg: pool.Config().ConnConfig}
	p.claims, p.settler = newClaims(p, p.dialect)
	p.recurrings = p.newRecurrings()
	p.failed = sqlstore.NewFailed(d, kit, newFailedSQL(p.names.failed))
	p.browser = sqlstore.NewBrowser(d, kit, newBrowseSQL(p.names.table))
	return p, nil
}

// Durable reports true: rows survive restarts of the process and of the
// database.
func (p *Persistence) Durable() bool { return true }

// Ping checks that the database answers, through the pool (bus.Pinger,
// for Bus.Health): it waits for a free connection within ctx.
func (p *Persistence) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }

// Channel returns the LISTEN/NOTIFY channel of this table:
// "postbus.<schema>.<table>", or "postbus." and a hash of both when that
// would exceed PostgreSQL's 63-byte limit.
func (p *Persistence) Channel() string { return p.names.channel }

// Table returns the quoted, schema-qualified table name.
func (p *Persistence) Table() string { return p.names.table }

func channelName(schema, table string) string {
	ch := "postbus." + schema + "." + table
	if len(ch) <= maxIdentifierLen {
		return ch
	}
	sum := sha256.Sum256([]byte(schema + "." + table))
	return "postbus." + hex.EncodeToString(sum[:16])
}

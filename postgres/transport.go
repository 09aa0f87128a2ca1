package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
	_ bus.Pinger            = (*Transport)(nil)
)

// Transport carries Postbus envelopes in PostgreSQL tables: queues as rows
// of one table claimed with FOR UPDATE SKIP LOCKED under a lease, LISTEN/
// NOTIFY wake-up with polling as the fallback, and event subscriptions in
// a table. It is safe for concurrent use. Make one with NewTransport; the
// caller owns the pool and closes it after Close.
type Transport struct {
	pool     *pgxpool.Pool
	opts     TransportOptions
	names    tnames
	sql      tstatements
	log      *slog.Logger
	identity string
	sends    *committer
	acks     *sqlstore.Grouper[heldRow]
	listen   *listener
	owner    *owner

	setupMu sync.Mutex
	setUp   bool
	closed  atomic.Bool
}

// NewTransport returns a transport on pool, configured by opts (zero values
// mean the documented defaults). It does not touch the database: Provision
// (which bus.Start calls) creates the tables. An invalid schema or prefix
// is a *NameError, another invalid option an *OptionsError.
func NewTransport(pool *pgxpool.Pool, opts TransportOptions) (*Transport, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t := &Transport{pool: pool, opts: opts, names: newTNames(opts), log: opts.Logger}
	t.sql = newTStatements(t.names)
	t.identity = "postgres:" + pool.Config().ConnConfig.Database + "/" + opts.Schema + "." + opts.TablePrefix
	t.sends = newCommitter(opts.MaxSendBatch, t.commitRows)
	t.acks = sqlstore.NewGrouper(1000, 2, 0, t.ack)
	t.listen = &listener{t: t, subs: map[string]map[chan struct{}]struct{}{}}
	t.owner = newOwner(t)
	return t, nil
}

// Identity returns "postgres:<database>/<schema>.<prefix>": the database
// name from the pool's configuration (never its password or host) and the
// transport's tables. Scheduled rows carry it, so a dispatcher only sends
// rows scheduled through the same tables.
func (t *Transport) Identity() string { return t.identity }

// Ping checks that the database answers, through the pool (bus.Pinger,
// for Bus.Health): it waits for a free connection within ctx.
func (t *Transport) Ping(ctx context.Context) error { return t.pool.Ping(ctx) }

// MessagesTable returns the quoted, schema-qualified table that holds every
// queue's messages.
func (t *Transport) MessagesTable() string { return t.names.messages }

// SubscriptionsTable returns the quoted, schema-qualified subscriptions table.
func (t *Transport) SubscriptionsTable() string { return t.names.subs }

// Provision creates the schema and tables if missing and subscribes
// topo.Queue to topo.Events. Queues need nothing of their own: a queue is
// the rows with its name. It is idempotent and safe to run from many
// processes at once (a transaction-scoped advisory lock serializes the DDL).
// Like Persistence.Setup, an error that says the server cannot be reached
// for now matches bus.ErrStoreUnavailable, and bus.Start retries
// Provision until Config.StartTimeout.
func (t *Transport) Provision(ctx context.Context, topo bus.Topology) error {
	if err := t.ensureTables(ctx); err != nil {
		return err
	}
	if len(topo.Events) == 0 {
		return nil
	}
	if err := checkQueue(topo.Queue); err != nil {
		return err
	}
	if _, err := t.pool.Exec(ctx, t.sql.subscribe, topo.Events, topo.Queue); err != nil {
		return unavailable(fmt.Errorf("postgres: provision subscriptions of %s: %w", topo.Queue, err))
	}
	return nil
}

func (t *Transport) ensureTables(ctx context.Context) error {
	t.setupMu.Lock()
	defer t.setupMu.Unlock()
	if t.setUp {
		return nil
	}
	// Only when something is missing: CREATE INDEX IF NOT EXISTS takes a
	// SHARE lock on the table even when the index exists, which waits for
	// every open transaction that wrote to it (a dispatcher's claim that
	// hands over into it, an outbox handling) and holds up every write
	// queued behind it, at each process start.
	var present bool
	err := t.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'lease_owner' AND NOT attisdropped)`,
		t.names.messages, t.names.subs, t.names.regIdx).Scan(&present)
	if err == nil && present {
		t.setUp = true
		return nil
	}
	err = pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, t.names.lockKey); err != nil {
			return err
		}
		for _, stmt := range transportDDL(t.names) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return unavailable(fmt.Errorf("postgres: provision transport tables: %w", err))
	}
	t.setUp = true
	return nil
}

// Close marks the transport closed: later sends fail with
// ErrTransportClosed. It waits until the sends already accepted are
// committed or have failed; when ctx ends first, it abandons their
// commits (those sends fail) and returns ctx's error. Receive calls end
// with their own contexts; the LISTEN connection is released when the last
// one ends, and so is the liveness connection. The pool stays open.
func (t *Transport) Close(ctx context.Context) error {
	t.closed.Store(true)
	if err := t.sends.close(ctx); err != nil {
		return err
	}
	return ctx.Err()
}

// sendRow is one Send or Publish waiting for its INSERT.
type sendRow struct {
	queue    string // empty for a publish
	id, typ  string
	headers  string
	body     []byte
	envelope []byte
}

// Send inserts env into queue and returns once the row is committed.
// Concurrent sends share one transaction and one commit (group commit),
// each with its own outcome. When ctx ends first, Send returns ctx's
// error at once, but a message whose commit had begun may still be sent.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	return t.enqueue(ctx, queue, env)
}

// Publish inserts env once for every queue subscribed to env.Type (one
// INSERT ... SELECT over the subscriptions table) and returns once the
// rows are committed. With no subscriber nothing is stored.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	return t.enqueue(ctx, "", env)
}

func (t *Transport) enqueue(ctx context.Context, queue string, env *bus.Envelope) error {
	if t.closed.Load() {
		return ErrTransportClosed
	}
	if env == nil {
		return fmt.Errorf("%w: nil envelope", bus.ErrInvalidMessage)
	}
	if len(env.Body) > t.opts.MaxMessageSize {
		return &OversizeError{ID: env.ID, Size: len(env.Body), Max: t.opts.MaxMessageSize}
	}
	row, err := newSendRow(queue, env)
	if err != nil {
		return err
	}
	if c, ok := t.joined(ctx); ok { // a dispatcher's hand-over: see handover_join.go
		if err := t.insertJoined(ctx, c, row); err != nil {
			return fmt.Errorf("postgres: send %s: %w", env.ID, err)
		}
		return nil
	}
	err = t.sends.send(ctx, row)
	if isUndefinedTable(err) { // sent before anything was provisioned
		if err = t.ensureTables(ctx); err == nil {
			err = t.sends.send(ctx, row)
		}
	}
	if err != nil {
		return fmt.Errorf("postgres: send %s: %w", env.ID, err)
	}
	return nil
}

func newSendRow(queue string, env *bus.Envelope) (sendRow, error) {
	row := sendRow{queue: queue, id: env.ID, typ: env.Type, body: env.Body}
	if row.body == nil {
		row.body = []byte{}
	}
	if len(env.Headers) > 0 {
		h, err := json.Marshal(env.Headers)
		if err != nil {
			return sendRow{}, fmt.Errorf("postgres: encode headers of %s: %w", env.ID, err)
		}
		row.headers = string(h)
	}
	rest := *env
	rest.Body = nil // in its own column
	row.envelope = bus.MarshalEnvelope(&rest)
	return row, nil
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// maxQueueLen bounds queue names: a queue name is a NOTIFY payload.
const maxQueueLen = 1000

func checkQueue(queue string) error {
	switch {
	case queue == "":
		return &NameError{Field: "queue", Name: queue, Reason: "must not be empty"}
	case len(queue) > maxQueueLen:
		return &NameError{Field: "queue", Name: queue[:40] + "…", Reason: fmt.Sprintf("longer than %d bytes", maxQueueLen)}
	case !utf8.ValidString(queue) || strings.ContainsRune(queue, 0):
		return &NameError{Field: "queue", Name: queue, Reason: "must be valid UTF-8 without NUL bytes"}
	}
	return nil
}

// settleTimeout bounds acknowledgements and releases, which run after the
// Receive or delivery context may have ended.
const settleTimeout = 10 * time.Second

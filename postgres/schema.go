package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Migrations returns the DDL that Setup runs for the default schema and
// table (public.outgoing_messages), one statement per element, for users who
// manage migrations with their own tool. Every statement is idempotent, and
// together they also bring a table made by an earlier version up to date.
func Migrations() []string {
	m, _ := MigrationsFor(DefaultSchema, DefaultTable) // the defaults are valid names
	return m
}

// MigrationsFor returns the DDL that Setup runs for the given schema and
// table, with the default inbox table (<table>_inbox) and saga table
// (<table>_sagas); empty names mean the defaults. An invalid name is an *NameError.
func MigrationsFor(schema, table string) ([]string, error) {
	return MigrationsForOptions(Options{Schema: schema, Table: table})
}

// MigrationsForOptions returns the DDL that Setup runs for the names in
// opts (Schema, Table, InboxTable, SagaTable; other fields are ignored). An
// invalid name is an *NameError.
func MigrationsForOptions(opts Options) ([]string, error) {
	o := Options{Schema: opts.Schema, Table: opts.Table, InboxTable: opts.InboxTable, SagaTable: opts.SagaTable}.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return ddl(newNames(o)), nil
}

// names holds the quoted identifiers every statement is built from.
type names struct {
	schema   string // quoted schema
	table    string // quoted schema.table
	index    string // quoted claim index name (unqualified, as CREATE INDEX wants)
	oldIndex string // quoted schema.index of the claim index of earlier versions
	regIdx   string // schema.index for to_regclass
	regOld   string // schema.old index for to_regclass
	regTbl   string // schema.table for to_regclass
	inbox    string // quoted schema.inbox table
	inboxIdx string // quoted inbox purge index name (unqualified)
	regInbox string // schema.inbox for to_regclass
	regInIdx string // schema.inbox purge index for to_regclass
	sagas    string // quoted schema.saga table
	regSagas string // schema.sagas for to_regclass
	dueIdx   string // quoted (due_at, id) index name (unqualified)
	typeIdx  string // quoted (message_type, due_at, id) index name (unqualified)
	regType  string // schema.type index for to_regclass
	failed   string // quoted schema.failed-message table
	fLastIdx string // quoted (last_failed, id) index name (unqualified)
	fGrpIdx  string // quoted (failure_group, last_failed, id) index name (unqualified)
	regFGrp  string // schema.group index for to_regclass
	recur    string // quoted schema.recurring-schedule table
	regRecur string // schema.recurring table for to_regclass
	recurDue string // quoted runtime due index name (unqualified)
	regRDue  string // schema.runtime due index for to_regclass
	runs     string // quoted schema.recurring runs table
	regRuns  string // schema.runs table for to_regclass
	channel  string // NOTIFY channel, raw (pg_notify takes text)
	lockKey  string // advisory lock key text, hashed by the server
}

func newNames(o Options) names {
	return names{
		schema:   pgx.Identifier{o.Schema}.Sanitize(),
		table:    pgx.Identifier{o.Schema, o.Table}.Sanitize(),
		index:    pgx.Identifier{o.Table + indexSuffix}.Sanitize(),
		oldIndex: pgx.Identifier{o.Schema, o.Table + oldIndexSuffix}.Sanitize(),
		regIdx:   pgx.Identifier{o.Schema, o.Table + indexSuffix}.Sanitize(),
		regOld:   pgx.Identifier{o.Schema, o.Table + oldIndexSuffix}.Sanitize(),
		regTbl:   pgx.Identifier{o.Schema, o.Table}.Sanitize(),
		inbox:    pgx.Identifier{o.Schema, o.InboxTable}.Sanitize(),
		inboxIdx: pgx.Identifier{o.InboxTable + inboxIndexSuffix}.Sanitize(),
		regInbox: pgx.Identifier{o.Schema, o.InboxTable}.Sanitize(),
		regInIdx: pgx.Identifier{o.Schema, o.InboxTable + inboxIndexSuffix}.Sanitize(),
		sagas:    pgx.Identifier{o.Schema, o.SagaTable}.Sanitize(),
		regSagas: pgx.Identifier{o.Schema, o.SagaTable}.Sanitize(),
		dueIdx:   pgx.Identifier{o.Table + dueIndexSuffix}.Sanitize(),
		typeIdx:  pgx.Identifier{o.Table + typeIndexSuffix}.Sanitize(),
		regType:  pgx.Identifier{o.Schema, o.Table + typeIndexSuffix}.Sanitize(),
		failed:   pgx.Identifier{o.Schema, o.Table + failedSuffix}.Sanitize(),
		fLastIdx: pgx.Identifier{o.Table + failedSuffix + failedLastSuffix}.Sanitize(),
		fGrpIdx:  pgx.Identifier{o.Table + failedSuffix + failedGroupSuffix}.Sanitize(),
		regFGrp:  pgx.Identifier{o.Schema, o.Table + failedSuffix + failedGroupSuffix}.Sanitize(),
		recur:    pgx.Identifier{o.Schema, o.Table + recurringSuffix}.Sanitize(),
		regRecur: pgx.Identifier{o.Schema, o.Table + recurringSuffix}.Sanitize(),
		recurDue: pgx.Identifier{o.Table + recurringDueSuffix}.Sanitize(),
		regRDue:  pgx.Identifier{o.Schema, o.Table + recurringDueSuffix}.Sanitize(),
		runs:     pgx.Identifier{o.Schema, o.Table + runsSuffix}.Sanitize(),
		regRuns:  pgx.Identifier{o.Schema, o.Table + runsSuffix}.Sanitize(),
		channel:  channelName(o.Schema, o.Table),
		lockKey:  "postbus.setup." + o.Schema,
	}
}

// ddl is the schema. id uses the "C" collation: byte order, which is the
// time order of UUIDv7 IDs, and the cheapest comparison for both indexes
// whatever the database's default collation. available_at is the single
// "next claimable" time: the due time, pushed forward by each claim (the
// lease) and each failure (the retry time); a claim keeps the time it
// replaced in prior_available_at, where a release puts the row back (NULL
// for rows never claimed, and those leased before the column existed: a
// release then uses due_at). lease_token names the claim that holds the
// row (NULL when none does); transport is the identity of
// the transport the row is dispatched through (empty for rows stored
// before rows carried one). The (transport, available_at, id) index serves both
// the claim and NextDueOutgoing as ordered index scans, one per transport
// value, whatever the backlog.
//
// The statements after CREATE TABLE migrate tables made by earlier
// versions: the three columns (metadata-only changes: their defaults are
// constants or NULL), the claim index, and the drop of the (available_at, id)
// index it replaces. The last two statements are the inbox of the
// transactional outbox, keyed by (endpoint, message_id), and its handled_at
// index for the retention purge; the very last is the saga table
// (bus.SagaStore), keyed by (saga, correlation). Its state column is json,
// not jsonb: json keeps the bytes the saga stored exactly (jsonb would
// normalise them), and still reads with ->> and ->.
//
// The statements after it serve operators (bus.ScheduledBrowser and
// bus.FailedStore): the message_type column of scheduled rows (empty for
// rows stored before it), the (due_at, id) and (message_type, due_at, id)
// indexes that list rows by due time and type and count the due-time
// histogram, and the failed-message table <table>_failed with its
// (last_failed, id) index for the most-recent-first listing and its
// (failure_group, last_failed, id) index, which also carries first_failed,
// so that grouping and per-group listing and counting read the index only.
// On a large existing table, the two new indexes can be built ahead with
// CREATE INDEX CONCURRENTLY under the same names, so that Setup finds them
// and does not block writes while it builds them.
//
// Then come the table of recurring schedules (recurringDDL), the columns
// later versions added to it, the partial index of the runtime schedules'
// due times, and the table of the recurring runs under way (runsDDL).
func ddl(n names) []string {
	return []string{
		fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s`, n.schema),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id           text        COLLATE "C" PRIMARY KEY,
	kind         smallint    NOT NULL,
	envelope     bytea       NOT NULL,
	due_at       timestamptz NOT NULL,
	available_at timestamptz NOT NULL,
	lease_until  timestamptz,
	lease_token  text        COLLATE "C",
	prior_available_at timestamptz,
	transport    text        COLLATE "C" NOT NULL DEFAULT '',
	failures     integer     NOT NULL DEFAULT 0,
	last_error   text        NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL DEFAULT now()
)`, n.table),
		fmt.Sprintf(`ALTER TABLE %s
	ADD COLUMN IF NOT EXISTS lease_token text COLLATE "C",
	ADD COLUMN IF NOT EXISTS transport   text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS prior_available_at timestamptz`, n.table),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (transport, available_at, id)`, n.index, n.table),
		fmt.Sprintf(`DROP INDEX IF EXISTS %s`, n.oldIndex),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	endpoint   text        COLLATE "C" NOT NULL,
	message_id text        COLLATE "C" NOT NULL,
	handled_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (endpoint, message_id)
)`, n.inbox),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (handled_at)`, n.inboxIdx, n.inbox),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	saga        text        COLLATE "C" NOT NULL,
	correlation text        COLLATE "C" NOT NULL,
	id          text        COLLATE "C" NOT NULL,
	state       json        NOT NULL,
	timeouts    text[]      NOT NULL DEFAULT '{}',
	version     bigint      NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	updated_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (saga, correlation)
)`, n.sagas),
		fmt.Sprintf(`ALTER TABLE %s
	ADD COLUMN IF NOT EXISTS message_type text COLLATE "C" NOT NULL DEFAULT ''`, n.table),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (due_at, id)`, n.dueIdx, n.table),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (message_type, due_at, id)`, n.typeIdx, n.table),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id            text        COLLATE "C" PRIMARY KEY,
	message_type  text        COLLATE "C" NOT NULL,
	endpoint      text        COLLATE "C" NOT NULL,
	queue         text        COLLATE "C" NOT NULL,
	kind          text        NOT NULL,
	reason        text        NOT NULL,
	failure_group text        COLLATE "C" NOT NULL,
	attempts      integer     NOT NULL,
	failures      integer     NOT NULL,
	first_failed  timestamptz NOT NULL,
	last_failed   timestamptz NOT NULL,
	envelope      bytea       NOT NULL
)`, n.failed),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (last_failed, id)`, n.fLastIdx, n.failed),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (failure_group, last_failed, id) INCLUDE (first_failed)`, n.fGrpIdx, n.failed),
		recurringDDL(n),
		recurringMigrateDDL(n),
		recurringDueDDL(n),
		runsDDL(n),
	}
}

// Setup creates the schema, table and index, the inbox table and its
// index, and the saga table, if they are missing, and migrates a table made by an earlier
// version (see Migrations). It is
// idempotent, and safe when several processes run it at once: the DDL runs
// in one transaction under a transaction-scoped advisory lock per schema.
// When everything is already in place it only reads the catalog, so it
// takes no lock that would stall running dispatchers.
//
// An error that says the server cannot be reached for now (refused or
// lost connection, timeout, server starting up or shutting down, too many
// connections) matches bus.ErrStoreUnavailable, and bus.Start retries
// Setup until Config.StartTimeout; an error about what was asked (wrong
// password, unknown role or database, permission denied) does not, and
// fails Start at once.
func (p *Persistence) Setup(ctx context.Context) error {
	var err error
	for range 3 {
		if err = p.setupOnce(ctx); !isDuplicateObject(err) {
			break
		}
		// A concurrent Setup created an object this transaction could not
		// see: a backend does not refresh its catalog cache after waiting
		// for an advisory lock. A new transaction does.
	}
	if err != nil {
		return unavailable(fmt.Errorf("postgres: setup %s: %w", p.names.table, err))
	}
	p.log.Debug("postgres: scheduled-message table ready", "table", p.names.table)
	return nil
}

func (p *Persistence) setupOnce(ctx context.Context) error {
	// The claim index is on transport, and the type index on
	// message_type, so their presence shows those columns; lease_token is
	// looked up. The last index of the failed-message table shows it, and
	// the runtime due index of the recurring table shows its columns.
	var present bool
	err := p.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
	AND to_regclass($3) IS NULL
	AND to_regclass($4) IS NOT NULL AND to_regclass($5) IS NOT NULL AND to_regclass($6) IS NOT NULL
	AND to_regclass($7) IS NOT NULL AND to_regclass($8) IS NOT NULL AND to_regclass($9) IS NOT NULL
	AND to_regclass($10) IS NOT NULL AND to_regclass($11) IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'lease_token' AND NOT attisdropped)`,
		p.names.regTbl, p.names.regIdx, p.names.regOld, p.names.regInbox, p.names.regInIdx, p.names.regSagas,
		p.names.regType, p.names.regFGrp, p.names.regRecur, p.names.regRDue, p.names.regRuns).Scan(&present)
	if err != nil || present {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, p.names.lockKey); err != nil {
			return err
		}
		stmts := ddl(p.names)
		// CREATE SCHEMA checks the database-level CREATE privilege even
		// when the schema exists, which application roles often lack.
		var haveSchema bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, p.names.schema).Scan(&haveSchema); err != nil {
			return err
		}
		if haveSchema {
			stmts = stmts[1:]
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
}

// isDuplicateObject reports the errors of creating an object that a
// concurrent transaction has just created.
func isDuplicateObject(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", // unique_violation (on a catalog index)
		"42P06", // duplicate_schema
		"42P07", // duplicate_table (tables and indexes)
		"42710": // duplicate_object
		return true
	}
	return false
}

package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
)

// Migrations returns the DDL that Setup runs for the default table names
// (outgoing_messages and the tables named after it), one statement per
// element, for teams that run their own migration tool. Run them in order
// in one session: the last four add the columns of this version to a
// table made by an earlier one (a prepared ALTER TABLE). Running them
// again changes nothing.
func Migrations() []string {
	m, _ := MigrationsFor(DefaultTable) // the default is a valid name
	return m
}

// MigrationsFor returns the DDL that Setup runs for Options.Table table
// (empty: the default). An invalid name is an *OptionsError.
func MigrationsFor(table string) ([]string, error) {
	o := Options{Table: table}.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return ddl(newNames(o.Table)), nil
}

// tableOptions ends every CREATE TABLE: InnoDB (row locks, SKIP LOCKED,
// transactions) and utf8mb4 for the few free-text columns.
const tableOptions = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

// ddl is the schema.
//
// Keys (message IDs, lease tokens, transports, types, endpoints, saga and
// schedule names) are VARBINARY: compared byte for byte, with no padding
// and no character set conversion. utf8mb4_bin is a PAD SPACE collation,
// under which "a" and "a " are one key, and a utf8mb4 column cannot hold
// an ID that is not valid UTF-8; VARBINARY keeps both apart. Free text
// (errors, reasons, schedules) is utf8mb4, made valid before it is stored.
//
// Times are DATETIME(6) in UTC, written and compared on the server's
// UTC_TIMESTAMP(6). available_at is the single "next claimable" time: the
// due time, pushed forward by each claim (the lease) and each failure (the
// retry time); a claim keeps the time it replaced in prior_available_at,
// where a release puts the row back. The (transport, available_at, id)
// index serves the claim and the next due time as ordered range scans,
// one per transport value; (due_at, id) and (message_type, due_at, id)
// serve the operators' listings and histogram.
func ddl(n names) []string {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + n.table + ` (
	id                 VARBINARY(512)  NOT NULL,
	kind               SMALLINT        NOT NULL,
	envelope           LONGBLOB        NOT NULL,
	due_at             DATETIME(6)     NOT NULL,
	available_at       DATETIME(6)     NOT NULL,
	prior_available_at DATETIME(6)     NULL,
	lease_until        DATETIME(6)     NULL,
	lease_token        VARBINARY(64)   NULL,
	transport          VARBINARY(255)  NOT NULL DEFAULT '',
	message_type       VARBINARY(1024) NOT NULL DEFAULT '',
	failures           INT             NOT NULL DEFAULT 0,
	last_error         VARCHAR(4096)   NOT NULL DEFAULT '',
	created_at         DATETIME(6)     NOT NULL,
	PRIMARY KEY (id),
	KEY claim_idx (transport, available_at, id),
	KEY due_idx (due_at, id),
	KEY type_due_idx (message_type, due_at, id)
)` + tableOptions,
		`CREATE TABLE IF NOT EXISTS ` + n.inbox + ` (
	endpoint   VARBINARY(255) NOT NULL,
	message_id VARBINARY(512) NOT NULL,
	handled_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (endpoint, message_id),
	KEY handled_idx (handled_at)
)` + tableOptions,
		`CREATE TABLE IF NOT EXISTS ` + n.sagas + ` (
	saga        VARBINARY(255) NOT NULL,
	correlation VARBINARY(512) NOT NULL,
	id          VARBINARY(512) NOT NULL,
	state       LONGBLOB       NOT NULL,
	timeouts    LONGBLOB       NOT NULL,
	version     BIGINT         NOT NULL,
	created_at  DATETIME(6)    NOT NULL,
	updated_at  DATETIME(6)    NOT NULL,
	PRIMARY KEY (saga, correlation)
)` + tableOptions,
		`CREATE TABLE IF NOT EXISTS ` + n.failed + ` (
	id            VARBINARY(512)  NOT NULL,
	message_type  VARBINARY(1024) NOT NULL,
	endpoint      VARBINARY(255)  NOT NULL,
	queue         VARBINARY(255)  NOT NULL,
	kind          VARBINARY(64)   NOT NULL,
	reason        TEXT            NOT NULL,
	failure_group VARBINARY(255)  NOT NULL,
	attempts      INT             NOT NULL,
	failures      INT             NOT NULL,
	first_failed  DATETIME(6)     NOT NULL,
	last_failed   DATETIME(6)     NOT NULL,
	envelope      LONGBLOB        NOT NULL,
	PRIMARY KEY (id),
	KEY last_idx (last_failed, id),
	KEY grp_idx (failure_group, last_failed, id, first_failed)
)` + tableOptions,
		`CREATE TABLE IF NOT EXISTS ` + n.recurring + ` (
	name        VARBINARY(255)  NOT NULL,
	fingerprint VARBINARY(1024) NOT NULL,
	schedule    TEXT            NOT NULL,
	generation  BIGINT          NOT NULL,
	paused      BOOLEAN         NOT NULL DEFAULT FALSE,
	last_tick   DATETIME(6)     NULL,
	ticks       LONGBLOB        NOT NULL,
	alive_until DATETIME(6)     NULL,
	revision    BIGINT          NOT NULL DEFAULT 0,
	updated_at  DATETIME(6)     NOT NULL,
	` + strings.Join(runtimeColumns, ",\n\t") + `,
	PRIMARY KEY (name),
	KEY ` + runtimeIndex + `
)` + tableOptions,
	}
	stmts = append(stmts, runsDDL(n))
	return append(stmts, addColumns(n.raw+recurringSuffix, runtimeColumns, runtimeIndex)...)
}

// runtimeColumns are the recurring table's columns of schedules made at
// runtime (bus.RecurringRuntimeStore): the definition (spec, NULL for a
// schedule declared in code), when its next step is due (due_at, NULL:
// never), and its counts. claim_at is due_at of the records with a spec
// alone, so that runtimeIndex, which ClaimDueRecurring scans, holds no
// declared schedule, whatever its due_at: MariaDB has no partial index,
// but both servers index a virtual column.
var runtimeColumns = []string{
	"spec        LONGBLOB        NULL",
	"due_at      DATETIME(6)     NULL",
	"runs        BIGINT          NOT NULL DEFAULT 0",
	"skipped     BIGINT          NOT NULL DEFAULT 0",
	"claim_at    DATETIME(6)     AS (IF(spec IS NULL, NULL, due_at)) VIRTUAL",
}

// runtimeIndex serves ClaimDueRecurring as one ordered range scan of the
// runtime records due.
const runtimeIndex = `claim_idx (claim_at, name)`

// addColumns returns the statements that add columns (each written as in
// CREATE TABLE) and keys to table when it was made without them, as a
// table made by an earlier version was. MySQL has no ADD COLUMN IF NOT
// EXISTS (MariaDB has), so the ALTER TABLE is prepared from a string
// chosen by a look at information_schema for the first column; the
// statements run in one session, and leave a table that has it as it is.
func addColumns(table string, columns []string, keys ...string) []string {
	alter := "ALTER TABLE `" + table + "`\n\tADD COLUMN " + strings.Join(columns, ",\n\tADD COLUMN ")
	for _, k := range keys {
		alter += ",\n\tADD KEY " + k
	}
	first, _, _ := strings.Cut(columns[0], " ")
	return []string{
		"SET @postbus_ddl = IF(EXISTS (SELECT 1 FROM information_schema.COLUMNS\n" +
			"\tWHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + table + "' AND COLUMN_NAME = '" + first + "'),\n" +
			"\t'DO 0',\n\t'" + alter + "')",
		"PREPARE postbus_ddl FROM @postbus_ddl",
		"EXECUTE postbus_ddl",
		"DEALLOCATE PREPARE postbus_ddl",
	}
}

// Setup creates the tables and their indexes if they are missing, and
// adds the columns of this version to tables made by an earlier one (see
// Migrations). It is idempotent, and safe when several processes run it
// at once: CREATE TABLE IF NOT EXISTS is atomic on the server, and of two
// racing ALTER TABLEs that add a column, the second finds it there and
// changes nothing. bus.Start calls it unless the bus is configured to
// skip setup.
//
// An error that says the server cannot be reached for now (refused or
// lost connection, timeout, server shutting down, too many connections)
// matches bus.ErrStoreUnavailable, and bus.Start retries Setup until
// Config.StartTimeout; an error about what was asked (access denied,
// unknown database) does not, and fails Start at once.
func (p *Persistence) Setup(ctx context.Context) error {
	conn, err := p.db.Conn(ctx) // the statements share a session
	if err != nil {
		return unavailable(fmt.Errorf("mysql: setup %s: %w", p.n.table, err))
	}
	defer func() { _ = conn.Close() }()
	for _, stmt := range ddl(p.n) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil && !addedMeanwhile(err) {
			return unavailable(fmt.Errorf("mysql: setup %s: %w", p.n.table, err))
		}
	}
	if err := p.readPacketLimit(ctx); err != nil {
		return unavailable(fmt.Errorf("mysql: setup: read max_allowed_packet: %w", err))
	}
	p.log.Debug("mysql: tables ready", "table", p.n.table)
	return nil
}

// addedMeanwhile reports whether err is that of an ALTER TABLE whose
// column or key another process's Setup added since the look that chose
// it.
func addedMeanwhile(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && (me.Number == 1060 || me.Number == 1061) // ER_DUP_FIELDNAME, ER_DUP_KEYNAME
}

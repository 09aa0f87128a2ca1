package sqlite

import (
	"fmt"
	"strings"
)

// insertChunk is how many rows one INSERT statement carries: 8 parameters
// a row keeps a chunk far below SQLite's parameter limit, and multi-row
// statements store several times faster than one statement a row.
const insertChunk = 64

// queries holds the SQL for one table name, built once by Open.
type queries struct {
	table      string
	create     string
	columns    string // the table's column names, for the migration check
	addColumns []addColumn
	indexes    []string // run after the migration
	insert     string   // insertChunk rows
	insertOne  string   // one row, for the remainder of a batch
	selectDue  string
	lease      string
	deleteIDs  string
	releaseIDs string
	recordFail string
	nextDue    string
	cancelOne  string
	countRows  string

	inbox       string // the inbox table, created by Setup
	inboxIndex  string
	inboxInsert string
	inboxPurge  string

	sagas sagaQueries // the saga table, created by Setup
}

// addColumn is a column that tables created by earlier versions lack.
type addColumn struct{ name, ddl string }

// Times are stored as INTEGER Unix nanoseconds; 0 means "none" for
// lease_until. available_at is the time the row next becomes claimable: it
// starts as due_at and is pushed forward by each claim (the lease) and each
// failure (the retry time), so one index, led by transport, serves every
// claim. A claim keeps the available_at it replaces in prior_available_at,
// where a release puts the row back (due_at when it is NULL: a row leased
// before the column existed). lease_token is NULL unless a claim holds the
// row.
func newQueries(table string) queries {
	t := table
	row := "(?, ?, ?, ?, ?, ?, ?, ?)"
	insertHead := "INSERT OR IGNORE INTO " + t +
		" (id, kind, envelope, due_at, available_at, created_at, transport, message_type) VALUES "
	cols := "id, kind, envelope, due_at, failures, last_error, transport, message_type, available_at"
	// One ordered, limited index range per transport value: the row's own
	// transport and '' (rows stored before rows carried one). An OR of the
	// two would make SQLite sort every due row before applying the limit.
	branch := func(where string) string {
		return "SELECT * FROM (SELECT " + cols + " FROM " + t + " WHERE " + where +
			" AND available_at <= ?2 ORDER BY available_at, id LIMIT ?3)"
	}
	first := func(where string) string {
		return "SELECT available_at AS a FROM (SELECT available_at FROM " + t + " WHERE " + where +
			" ORDER BY available_at LIMIT 1)"
	}
	return queries{
		table: t,
		create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id           TEXT    NOT NULL PRIMARY KEY,
	kind         INTEGER NOT NULL,
	envelope     BLOB    NOT NULL,
	due_at       INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	lease_until  INTEGER NOT NULL DEFAULT 0,
	failures     INTEGER NOT NULL DEFAULT 0,
	last_error   TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	lease_token  TEXT,
	transport    TEXT    NOT NULL DEFAULT '',
	message_type TEXT    NOT NULL DEFAULT '',
	prior_available_at INTEGER
)`, t),
		columns: "SELECT name FROM pragma_table_info(?)",
		addColumns: []addColumn{
			{"lease_token", "ALTER TABLE " + t + " ADD COLUMN lease_token TEXT"},
			{"transport", "ALTER TABLE " + t + " ADD COLUMN transport TEXT NOT NULL DEFAULT ''"},
			{"message_type", "ALTER TABLE " + t + " ADD COLUMN message_type TEXT NOT NULL DEFAULT ''"},
			{"prior_available_at", "ALTER TABLE " + t + " ADD COLUMN prior_available_at INTEGER"},
		},
		indexes: []string{
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_claim_idx ON %s (transport, available_at, id)", t, t),
			// The index of earlier versions, (available_at, id), serves
			// no query now; dropping it spares every write an update.
			fmt.Sprintf("DROP INDEX IF EXISTS %s_available_idx", t),
			// Operators' listings, counts and histogram (browse.go).
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_due_idx ON %s (due_at, id)", t, t),
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_type_due_idx ON %s (message_type, due_at, id)", t, t),
			// The failed-message store (failed.go).
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_failed (
	id            TEXT    NOT NULL PRIMARY KEY,
	message_type  TEXT    NOT NULL,
	endpoint      TEXT    NOT NULL,
	queue         TEXT    NOT NULL,
	kind          TEXT    NOT NULL,
	reason        TEXT    NOT NULL,
	failure_group TEXT    NOT NULL,
	attempts      INTEGER NOT NULL,
	failures      INTEGER NOT NULL,
	first_failed  INTEGER NOT NULL,
	last_failed   INTEGER NOT NULL,
	envelope      BLOB    NOT NULL
)`, t),
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_failed_last_idx ON %s_failed (last_failed, id)", t, t),
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_failed_grp_idx ON %s_failed (failure_group, last_failed, id, first_failed)", t, t),
		},
		insert:    insertHead + strings.Repeat(row+", ", insertChunk-1) + row,
		insertOne: insertHead + row,
		selectDue: "SELECT " + cols + " FROM (" + branch("transport = ?1") +
			" UNION ALL " + branch("transport = '' AND ?1 <> ''") + ") ORDER BY available_at, id LIMIT ?3",
		// Runs in the claim's write transaction, on the IDs it selected.
		lease:      "UPDATE " + t + " SET prior_available_at = available_at, available_at = ?1, lease_until = ?1, lease_token = ?2 WHERE id IN (SELECT value FROM json_each(?3))",
		deleteIDs:  "DELETE FROM " + t + " WHERE lease_token = ?1 AND id IN (SELECT value FROM json_each(?2))",
		releaseIDs: "UPDATE " + t + " SET available_at = coalesce(prior_available_at, due_at), lease_until = 0, lease_token = NULL WHERE lease_token = ?1 AND id IN (SELECT value FROM json_each(?2))",
		recordFail: "UPDATE " + t + " SET failures = failures + 1, last_error = ?1, available_at = ?2, lease_until = 0, lease_token = NULL WHERE id = ?3 AND lease_token = ?4",
		nextDue:    "SELECT min(a) FROM (" + first("transport = ?1") + " UNION ALL " + first("transport = '' AND ?1 <> ''") + ")",
		cancelOne:  "DELETE FROM " + t + " WHERE id = ?1 AND (lease_token IS NULL OR lease_until <= ?2)",
		countRows:  "SELECT count(*) FROM " + t,

		// The inbox: one row per message an endpoint handled through the
		// outbox, kept for the retention and purged by handled_at.
		inbox: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_inbox (
	endpoint   TEXT    NOT NULL,
	message_id TEXT    NOT NULL,
	handled_at INTEGER NOT NULL,
	PRIMARY KEY (endpoint, message_id)
)`, t),
		inboxIndex:  fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_inbox_handled_idx ON %s_inbox (handled_at)", t, t),
		inboxInsert: "INSERT OR IGNORE INTO " + t + "_inbox (endpoint, message_id, handled_at) VALUES (?1, ?2, ?3)",
		inboxPurge: "DELETE FROM " + t + "_inbox WHERE rowid IN (SELECT rowid FROM " + t +
			"_inbox WHERE handled_at < ?1 ORDER BY handled_at LIMIT ?2)",

		sagas: newSagaQueries(t + "_sagas"),
	}
}

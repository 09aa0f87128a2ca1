package sqlite

import (
	"fmt"
	"strings"
)

// insertChunk is how many rows one INSERT statement carries: 7 parameters
// a row keeps a chunk far below SQLite's parameter limit, and multi-row
// statements store several times faster than one statement a row.
const insertChunk = 64

// queries holds the SQL for one table name, built once by Open.
type queries struct {
	schema     []string
	insert     string // insertChunk rows
	insertOne  string // one row, for the remainder of a batch
	selectDue  string
	leaseDue   string
	deleteIDs  string
	releaseIDs string
	recordFail string
	nextDue    string
	cancelOne  string
	countRows  string
}

// Times are stored as INTEGER Unix nanoseconds; 0 means "none" for
// lease_until. available_at is the time the row next becomes claimable: it
// starts as due_at and is pushed forward by each claim (the lease) and each
// failure (the retry time), so one index serves every claim.
func newQueries(table string) queries {
	t := table
	row := "(?, ?, ?, ?, ?, ?, ?)"
	insertHead := "INSERT OR IGNORE INTO " + t +
		" (id, kind, envelope, due_at, available_at, created_at, lease_until) VALUES "
	due := "SELECT id FROM " + t + " WHERE available_at <= ?1 ORDER BY available_at, id LIMIT ?2"
	return queries{
		schema: []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id           TEXT    NOT NULL PRIMARY KEY,
	kind         INTEGER NOT NULL,
	envelope     BLOB    NOT NULL,
	due_at       INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	lease_until  INTEGER NOT NULL DEFAULT 0,
	failures     INTEGER NOT NULL DEFAULT 0,
	last_error   TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL
)`, t),
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_available_idx ON %s (available_at, id)", t, t),
		},
		insert:    insertHead + strings.Repeat(row+", ", insertChunk-1) + row,
		insertOne: insertHead + row,
		selectDue: "SELECT id, kind, envelope, due_at, failures, last_error FROM " + t +
			" WHERE available_at <= ?1 ORDER BY available_at, id LIMIT ?2",
		// Run in the same write transaction as selectDue, so it picks the
		// same rows: no other writer can commit in between.
		leaseDue:   "UPDATE " + t + " SET available_at = ?3, lease_until = ?3 WHERE id IN (" + due + ")",
		deleteIDs:  "DELETE FROM " + t + " WHERE id IN (SELECT value FROM json_each(?))",
		releaseIDs: "UPDATE " + t + " SET available_at = due_at, lease_until = 0 WHERE lease_until <> 0 AND id IN (SELECT value FROM json_each(?))",
		recordFail: "UPDATE " + t + " SET failures = failures + 1, last_error = ?, available_at = ?, lease_until = 0 WHERE id = ?",
		nextDue:    "SELECT min(available_at) FROM " + t,
		cancelOne:  "DELETE FROM " + t + " WHERE id = ?",
		countRows:  "SELECT count(*) FROM " + t,
	}
}

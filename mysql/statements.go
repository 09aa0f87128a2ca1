package mysql

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/postbus/bus/backend/sqlstore"
)

// statements is the SQL of the scheduled store and the inbox, built once
// per Persistence from the quoted names. Values always travel as
// parameters; statements that name many rows have an IN list built for
// the count (inList).
type statements struct {
	insertHead string // INSERT … VALUES, followed by rows of insertRow
	insertTail string
	candidates string // the claim's look at the earliest claimable rows, without locks
	lockHead   string // the claim's SELECT … FOR UPDATE SKIP LOCKED by ID; followed by an IN list
	deleteHead string // DELETE of rows a claim holds; %s is an idList
	failure    string // a failure of a row a claim holds
	lockFree   string // locks a row no one holds, without waiting
	cancel     string // DELETE of the row lockFree locked
	inbox      string
	purge      string
	scheduled  sqlstore.ScheduledSQL
}

// insertRow is one row of the insert: id, kind, envelope, then the due
// time as microseconds after the epoch (absolute) or after the server's
// now (relative, the second parameter true), then transport and type.
// available_at takes the due_at just computed: MySQL and MariaDB let a
// value refer to a column set earlier in its row.
const insertRow = "(?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, IF(?, UTC_TIMESTAMP(6), " + epochSQL + ")), due_at, ?, ?, UTC_TIMESTAMP(6))"

// insertParams is the number of parameters of insertRow.
const insertParams = 7

// claimColumns are what a claim returns of a row, in scanClaimed's order.
func claimColumns() string {
	return "id, kind, envelope, " + us("due_at") + " AS due_us, failures, last_error, transport, message_type, " +
		us("available_at") + " AS av, " + us("UTC_TIMESTAMP(6)") + " AS now_us"
}

func newStatements(n names) statements {
	t := n.table
	// One ordered, limited range of the (transport, available_at, id)
	// index per transport value: the claimer's and '' (rows stored
	// without a transport). An IN of both would make the server sort
	// every due row of both before the limit. It reads without locks: a
	// range scan that locks would also lock, and keep locked, the first
	// row past the range (InnoDB reads it to find the range's end), the
	// next row to fall due. The rows are then locked by primary key.
	branch := func(where string) string {
		return "(SELECT id, " + us("available_at") + " AS av FROM " + t + " WHERE " + where +
			" AND available_at <= " + nowPlus("?") + " ORDER BY available_at, id LIMIT ?)"
	}
	q := statements{
		insertHead: "INSERT INTO " + t + " (id, kind, envelope, due_at, available_at, transport, message_type, created_at) VALUES ",
		// A no-op on a stored ID: the stored row stays as it is. Unlike
		// INSERT IGNORE, it does not turn other errors into warnings.
		insertTail: " ON DUPLICATE KEY UPDATE id = id",
		candidates: branch("transport = ?") + " UNION ALL " + branch("transport = '' AND ? <> ''") +
			" ORDER BY av, id LIMIT ?",
		lockHead: "SELECT " + claimColumns() + " FROM " + t + " FORCE INDEX (PRIMARY) WHERE available_at <= " + nowPlus("?") +
			" AND (transport = ? OR transport = '') AND id IN ",
		// The claim's transaction holds the rows: no condition but the IDs.
		// A join from the list of IDs, so that the server looks each one
		// up by primary key: with id IN (…) it may scan the table (it
		// does when its statistics say the table is small), locking, and
		// waiting for, the rows other claims hold.
		deleteHead: "DELETE t FROM (%s) AS d STRAIGHT_JOIN " + t + " AS t FORCE INDEX (PRIMARY) ON t.id = d.id",
		// The lease columns are cleared for a row that a process of an
		// earlier version leased before its lease lapsed and the row was
		// claimed again.
		failure: "UPDATE " + t + " SET failures = failures + 1, last_error = ?, available_at = IF(? > 0, " + nowPlus("?") +
			", " + at("?") + "), prior_available_at = NULL, lease_until = NULL, lease_token = NULL WHERE id = ?",
		// A row a claim holds is locked: being delivered. So is one whose
		// lease, written by a process of an earlier version, runs at the
		// server's now.
		lockFree: "SELECT 1 FROM " + t + " WHERE id = ? AND (lease_token IS NULL OR lease_until <= UTC_TIMESTAMP(6)) FOR UPDATE SKIP LOCKED",
		cancel:   "DELETE FROM " + t + " WHERE id = ?",
		inbox:    "INSERT INTO " + n.inbox + " (endpoint, message_id, handled_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
		purge:    "DELETE FROM " + n.inbox + " WHERE handled_at < " + nowPlus("-?") + " ORDER BY handled_at LIMIT ?",
	}
	q.scheduled = sqlstore.ScheduledSQL{
		// One probe of the claim index per transport value.
		NextDue: fmt.Sprintf("SELECT MIN(av) FROM (SELECT %s AS av UNION ALL SELECT %s) AS d",
			us("(SELECT MIN(available_at) FROM "+t+" WHERE transport = ?)"),
			us("(SELECT MIN(available_at) FROM "+t+" WHERE transport = '' AND ? <> '')")),
		NextDueArgs: 2,
		CancelLock:  q.lockFree,
		Cancel:      q.cancel,
		Count:       "SELECT COUNT(*) FROM " + t,
		Now:         "SELECT " + us("UTC_TIMESTAMP(6)"),
	}
	return q
}

// idList is a derived table of ids, written as hexadecimal literals:
// binary strings of their exact bytes (a parameter's type would be fixed
// by the first row's).
func idList(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 0 {
			b.WriteString("SELECT X'")
		} else {
			b.WriteString(" UNION ALL SELECT X'")
		}
		b.WriteString(hex.EncodeToString([]byte(id)))
		b.WriteString("'")
		if i == 0 {
			b.WriteString(" AS id")
		}
	}
	return b.String()
}

// inList is "(?, ?, …)" for n values.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

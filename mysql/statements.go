package mysql

import (
	"fmt"
	"strings"
)

// statements is the SQL of the scheduled store and the inbox, built once
// per Persistence from the quoted names. Values always travel as
// parameters; statements that name many rows have an IN list built for
// the count (inList).
type statements struct {
	insertHead string // INSERT … VALUES, followed by rows of insertRow
	insertTail string
	claim      string // the look-ahead claim's SELECT … FOR UPDATE SKIP LOCKED
	leaseHead  string // UPDATE that leases; followed by an IN list
	deleteHead string // DELETE held rows; followed by an IN list
	releaseHd  string // UPDATE that releases held rows; followed by an IN list
	failure    string
	nextDue    string
	cancel     string
	inbox      string
	purge      string
	count      string
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
	// One ordered, limited, locking range of the (transport,
	// available_at, id) index per transport value: the claimer's and ''
	// (rows stored without a transport). An IN of both would make the
	// server sort, and lock, every due row of both before the limit.
	branch := func(where string) string {
		return "(SELECT " + claimColumns() + " FROM " + t + " WHERE " + where +
			" AND available_at <= " + nowPlus("?") + " ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED)"
	}
	return statements{
		insertHead: "INSERT INTO " + t + " (id, kind, envelope, due_at, available_at, transport, message_type, created_at) VALUES ",
		// A no-op on a stored ID: the stored row stays as it is. Unlike
		// INSERT IGNORE, it does not turn other errors into warnings.
		insertTail: " ON DUPLICATE KEY UPDATE id = id",
		claim: branch("transport = ?") + " UNION ALL " + branch("transport = '' AND ? <> ''") +
			" ORDER BY av, id LIMIT ?",
		// MySQL assigns left to right: prior_available_at takes the
		// available_at of before the claim.
		leaseHead: "UPDATE " + t + " SET prior_available_at = available_at, available_at = " + at("?") +
			", lease_until = " + at("?") + ", lease_token = ? WHERE id IN ",
		deleteHead: "DELETE FROM " + t + " WHERE lease_token = ? AND id IN ",
		releaseHd: "UPDATE " + t + " SET available_at = COALESCE(prior_available_at, due_at), prior_available_at = NULL," +
			" lease_until = NULL, lease_token = NULL WHERE lease_token = ? AND id IN ",
		failure: "UPDATE " + t + " SET failures = failures + 1, last_error = ?, available_at = IF(? > 0, " + nowPlus("?") +
			", " + at("?") + "), prior_available_at = NULL, lease_until = NULL, lease_token = NULL WHERE id = ? AND lease_token = ?",
		nextDue: fmt.Sprintf("SELECT %s, %s", us("(SELECT MIN(available_at) FROM "+t+" WHERE transport = ?)"),
			us("(SELECT MIN(available_at) FROM "+t+" WHERE transport = '' AND ? <> '')")),
		// A leased row is being delivered: it goes only once its lease
		// has lapsed on the server's clock.
		cancel: "DELETE FROM " + t + " WHERE id = ? AND (lease_token IS NULL OR lease_until <= UTC_TIMESTAMP(6))",
		inbox:  "INSERT INTO " + n.inbox + " (endpoint, message_id, handled_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
		purge:  "DELETE FROM " + n.inbox + " WHERE handled_at < " + nowPlus("-?") + " ORDER BY handled_at LIMIT ?",
		count:  "SELECT COUNT(*) FROM " + t,
	}
}

// inList is "(?, ?, …)" for n values.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

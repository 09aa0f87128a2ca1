package postgres

import "fmt"

// statements is the SQL of every operation, built once per Persistence from
// the quoted names. Values always travel as parameters; arrays
// (unnest / = ANY) make every batch one statement and one round trip.
type statements struct {
	insert    string // plain INSERT
	notify    string // INSERT that also notifies; empty without notifications
	claim     string
	ahead     string // the claim with a look-ahead window
	claimJoin string // claim and ahead leaving out the rows named by a last argument
	aheadJoin string
	delete    string
	failures  string
	cancel    string
	nextDue   string
	now       string
	inbox     string // the inbox row of a handling
	purge     string // expired inbox rows
}

// Durations travel as bigint microseconds and become intervals in SQL, so
// relative times (a delay, a lease, a retry backoff) are added to the
// server's now(), never to the client's clock.
const microsSQL = `* interval '1 microsecond'`

func newStatements(n names, notify bool) statements {
	t := n.table
	insert := insertSQL(t, `unnest($1::text[], $2::int2[], $3::bytea[], $4::timestamptz[], $5::bigint[], $6::text[], $7::text[])
           AS u(id, kind, envelope, due_at, delay_us, transport, message_type)`)
	var notifying string
	if notify {
		notifying = notifySQL(insert, "$8")
	}
	return statements{
		insert:    insert,
		notify:    notifying,
		claim:     claimSQL(t, false, false),
		ahead:     claimSQL(t, true, false),
		claimJoin: claimSQL(t, false, true),
		aheadJoin: claimSQL(t, true, true),
		// In the claim's transaction, which holds the rows locked.
		delete:   fmt.Sprintf(`DELETE FROM %s WHERE id = ANY($1::text[])`, t),
		failures: failuresSQL(t),
		// A claimed row is being delivered: it is skipped, not waited for.
		cancel: fmt.Sprintf(`DELETE FROM %s WHERE %s`, t, notHeld(t, "id = $1")),
		// One index probe per transport value; least ignores NULLs.
		nextDue: fmt.Sprintf(`SELECT least((SELECT min(available_at) FROM %[1]s WHERE transport = $1),
	(SELECT min(available_at) FROM %[1]s WHERE transport = ''))`, t),
		now:   `SELECT now()`,
		inbox: fmt.Sprintf(`INSERT INTO %s (endpoint, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, n.inbox),
		// One statement: the sub-select picks at most $2 expired rows,
		// skipping rows a concurrent purge holds.
		purge: fmt.Sprintf(`DELETE FROM %[1]s WHERE (endpoint, message_id) IN (
	SELECT endpoint, message_id FROM %[1]s
	WHERE handled_at < now() - $1::bigint %[2]s
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`, n.inbox, microsSQL),
	}
}

// insertSQL inserts the rows of from, a row source aliased u with the
// columns (id, kind, envelope, due_at, delay_us, transport, message_type),
// keeping the rows of IDs already stored.
//
// A row with a positive delay is due at the server's statement start +
// delay; otherwise at the due time the client gave. The statement start is
// now() for an autocommitted INSERT, and inside a longer transaction (an
// outbox handling, a caller's, a COPY) it is the time of the INSERT, not of
// BEGIN, so a delay is never cut short by what ran before it.
func insertSQL(t, from string) string {
	return fmt.Sprintf(`INSERT INTO %s (id, kind, envelope, due_at, available_at, transport, message_type)
SELECT r.id, r.kind, r.envelope, r.due, r.due, r.transport, r.message_type
FROM (SELECT u.id, u.kind, u.envelope, u.transport, u.message_type,
             CASE WHEN u.delay_us > 0 THEN statement_timestamp() + u.delay_us %s ELSE u.due_at END AS due
      FROM %s) AS r
ON CONFLICT (id) DO NOTHING`, t, microsSQL, from)
}

// notifySQL wraps insert so that it also notifies the channel named by the
// parameter channel. The notification is part of the insert's
// transaction, so listeners hear of rows only once they are committed, and
// only when at least one row was new. The payload is the earliest due time
// in Unix microseconds.
func notifySQL(insert, channel string) string {
	return fmt.Sprintf(`WITH ins AS (%s
RETURNING due_at)
SELECT pg_notify(%s, (extract(epoch FROM min(due_at)) * 1000000)::bigint::text) FROM ins HAVING count(*) > 0`, insert, channel)
}

// claimSQL locks the earliest claimable rows of transport $1, at most $2,
// and then rows stored without a transport (empty) to fill the limit, and
// returns them with the end of the claim's lease: the server's
// statement_timestamp() + $3 microseconds. It writes nothing: the rows stay locked by the claim's
// transaction until it settles them (see claims.go).
//
// Each transport value is its own ordered scan of the (transport,
// available_at, id) index, locking with SKIP LOCKED as it goes, so
// concurrent claimers never wait for or share a row, and each scan stops
// at its limit: every row locked is a row returned, since a row locked
// and not returned would stay locked until the claim ends. So the rows
// without a transport fill what the transport's own rows leave of the
// limit (none when it is full, and the second scan then reads nothing),
// rather than being merged with them by due time. The second scan is
// skipped when $1 is empty itself, or it would return the same rows twice.
//
// statement_timestamp() is the statement's start: in a new claim's
// transaction the same as now(), and in an open claim that takes in
// another (claims.go, join) the time of this claim, not of the first one.
// It is stable within the statement, so "available_at <=
// statement_timestamp()" is an index condition; clock_timestamp() is
// volatile and would turn it into a filter over the whole table.
//
// A generic plan made while the table was nearly empty reads it whole, so
// the claim's transaction sets plan_cache_mode to force_custom_plan and
// the claim is planned at each call. Planned for its arguments on a table
// without statistics, a scan guesses a few dozen due rows, below the
// limit, and reads every due row through a bitmap to sort them; "LIMIT
// (SELECT $2)" keeps the limit unknown to the planner, which then prefers
// the ordered index scan that stops at the limit.
//
// With ahead, the claim looks $4 microseconds past statement_timestamp() (still a stable
// bound, so still an index condition), gives the lease as $4 + $3, and
// also returns clock_timestamp() with each row: the server's time as the
// row leaves, from which the client tells how far ahead of its own clock
// each row falls due.
//
// With exclude, the rows whose IDs the last argument names are left out:
// an open claim that takes in another (claims.go, join) holds them, and
// SKIP LOCKED skips only other transactions' locks.
func claimSQL(t string, ahead, exclude bool) string {
	by, lease, now, last := "statement_timestamp()", "$3::bigint", "", 3
	if ahead {
		by, lease, now, last = "statement_timestamp() + $4::bigint "+microsSQL, "($3::bigint + $4::bigint)", ", clock_timestamp()", 4
	}
	if exclude {
		by += fmt.Sprintf(" AND id <> ALL($%d::text[])", last+1)
	}
	cols := "id, kind, envelope, due_at, failures, last_error, transport, message_type, available_at"
	return fmt.Sprintf(`WITH own AS (
	SELECT %[6]s FROM %[1]s
	WHERE transport = $1::text AND available_at <= %[3]s
	ORDER BY available_at, id
	LIMIT (SELECT $2::bigint)
	FOR UPDATE SKIP LOCKED
), legacy AS (
	SELECT %[6]s FROM %[1]s
	WHERE transport = '' AND $1::text <> '' AND available_at <= %[3]s
	ORDER BY available_at, id
	LIMIT (SELECT $2::bigint - (SELECT count(*) FROM own))
	FOR UPDATE SKIP LOCKED
), due AS (
	SELECT %[6]s FROM own
	UNION ALL
	SELECT %[6]s FROM legacy
)
SELECT id, kind, envelope, due_at, statement_timestamp() + %[4]s %[2]s, failures, last_error, transport, message_type, available_at%[5]s
FROM due ORDER BY available_at, id`, t, microsSQL, by, lease, now, cols)
}

// failuresSQL counts a failure on each row named ($1 IDs, $2 error
// texts), which the claim's transaction holds locked, and makes it
// claimable at the server's statement_timestamp() + $3 microseconds when
// that is positive, else at $4 (the client's retry time). Not now(): in
// the claim's transaction that is the time of the claim.
func failuresSQL(t string) string {
	return fmt.Sprintf(`UPDATE %s AS o
SET failures = o.failures + 1, last_error = f.err,
    available_at = CASE WHEN f.after_us > 0 THEN statement_timestamp() + f.after_us %s ELSE f.retry_at END
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[]) AS f(id, err, after_us, retry_at)
WHERE o.id = ANY($1::text[]) AND o.id = f.id`, t, microsSQL)
}

// notHeld is the condition a statement that writes rows outside a claim
// puts on them: rows a claim holds locked are being delivered, and are
// skipped rather than waited for (SKIP LOCKED), as are rows leased by a
// process of an earlier version whose lease is running (lease_token and
// lease_until, which this version no longer writes). where names the rows.
func notHeld(t, where string) string {
	return fmt.Sprintf(`id IN (SELECT id FROM %s WHERE %s AND (lease_token IS NULL OR lease_until <= statement_timestamp()) FOR UPDATE SKIP LOCKED)`, t, where)
}

package postgres

import "fmt"

// statements is the SQL of every operation, built once per Persistence from
// the quoted names. Values always travel as parameters; arrays
// (unnest / = ANY) make every batch one statement and one round trip.
type statements struct {
	insert   string // plain INSERT
	notify   string // INSERT that also notifies; empty without notifications
	claim    string
	ahead    string // the claim with a look-ahead window
	delete   string
	release  string
	failures string
	cancel   string
	nextDue  string
	now      string
	inbox    string // the inbox row of a handling
	purge    string // expired inbox rows
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
		insert:   insert,
		notify:   notifying,
		claim:    claimSQL(t, false),
		ahead:    claimSQL(t, true),
		delete:   fmt.Sprintf(`DELETE FROM %s AS o %s`, t, held("USING")),
		release:  fmt.Sprintf(`UPDATE %s AS o SET available_at = coalesce(o.prior_available_at, o.due_at), lease_until = NULL, lease_token = NULL %s`, t, held("FROM")),
		failures: failuresSQL(t),
		// A leased row is being delivered; it is removed only once its
		// lease has lapsed on the server's clock.
		cancel: fmt.Sprintf(`DELETE FROM %s WHERE id = $1 AND (lease_token IS NULL OR lease_until <= statement_timestamp())`, t),
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

// held is the condition of the settling statements: the rows named by the
// claims ($1 IDs, $2 their lease tokens, pairwise) that the tokens still
// hold. The redundant "o.id = ANY($1)" makes the primary key the way to the
// rows under any plan, as in the claim.
func held(join string) string {
	return fmt.Sprintf(`%s unnest($1::text[], $2::text[]) AS c(id, token)
WHERE o.id = ANY($1::text[]) AND o.id = c.id AND o.lease_token = c.token`, join)
}

// claimSQL leases the earliest claimable rows of transport $1 and of rows
// stored without a transport (empty), at most $2, for $3 microseconds, under
// the lease token $4.
//
// Each transport value is its own ordered scan of the (transport,
// available_at, id) index, locking with SKIP LOCKED as it goes, so
// concurrent claimers never wait for or share a row; the two are merged and
// cut to the limit. Rows of the second scan (empty transport) beyond the
// limit stay locked only until the statement ends. The second scan is
// skipped when $1 is empty itself, or it would return the same rows twice.
//
// The lease is applied with now(), the transaction start time, which in
// this single-statement transaction is the statement start. now() is stable
// within the statement, so "available_at <= now()" is an index condition;
// clock_timestamp() is volatile and would turn it into a filter over the
// whole table.
//
// The redundant "o.id = ANY(ARRAY(...))" makes the primary key the way to
// the rows being leased under any plan: pgx prepares the statement, and
// PostgreSQL's generic plan for it estimates "LIMIT $2" at a tenth of the
// table, and then hash-joins the CTE against a sequential scan of the whole
// table (536 ms a claim behind a backlog of 1,000,000 rows, against 1.4 ms
// with this condition).
// A generic plan made while the table was nearly empty still reads it
// whole, so the claims are planned at each call (replan.go). Planned for
// its arguments on a table without statistics, a scan guesses a few dozen
// due rows, below the limit, and reads every due row through a bitmap to
// sort them; "LIMIT (SELECT $2)" keeps the limit unknown to the planner,
// which then prefers the ordered index scan that stops at the limit.
//
// With ahead, the claim looks $5 microseconds past now() (still a stable
// bound, so still an index condition), leases for $5 + $3, and also
// returns clock_timestamp() with each row: the server's time as the row
// leaves, after the leasing, from which the client tells how far ahead of
// its own clock each row falls due.
func claimSQL(t string, ahead bool) string {
	by, lease, now := "now()", "$3::bigint", ""
	if ahead {
		by, lease, now = "now() + $5::bigint "+microsSQL, "($3::bigint + $5::bigint)", ", clock_timestamp()"
	}
	return fmt.Sprintf(`WITH own AS (
	SELECT id, available_at FROM %[1]s
	WHERE transport = $1::text AND available_at <= %[3]s
	ORDER BY available_at, id
	LIMIT (SELECT $2::bigint)
	FOR UPDATE SKIP LOCKED
), legacy AS (
	SELECT id, available_at FROM %[1]s
	WHERE transport = '' AND $1::text <> '' AND available_at <= %[3]s
	ORDER BY available_at, id
	LIMIT (SELECT $2::bigint)
	FOR UPDATE SKIP LOCKED
), due AS (
	SELECT id, available_at FROM own
	UNION ALL
	SELECT id, available_at FROM legacy
	ORDER BY available_at, id
	LIMIT $2
), leased AS (
	UPDATE %[1]s AS o
	SET prior_available_at = o.available_at,
	    available_at = now() + %[4]s %[2]s,
	    lease_until  = now() + %[4]s %[2]s,
	    lease_token  = $4::text
	WHERE o.id = ANY(ARRAY(SELECT id FROM due))
	RETURNING o.id, o.kind, o.envelope, o.due_at, o.lease_until, o.failures, o.last_error, o.transport, o.message_type
)
SELECT l.id, l.kind, l.envelope, l.due_at, l.lease_until, l.failures, l.last_error, l.transport, l.message_type, due.available_at%[5]s
FROM leased AS l JOIN due ON due.id = l.id`, t, microsSQL, by, lease, now)
}

// failuresSQL counts a failure on each row its token still holds ($1 IDs,
// $2 tokens, $3 error texts), ends the lease, and makes the row claimable
// at the server's now() + $4 microseconds when that is positive, else at
// $5 (the client's retry time).
func failuresSQL(t string) string {
	return fmt.Sprintf(`UPDATE %s AS o
SET failures = o.failures + 1, last_error = f.err, lease_until = NULL, lease_token = NULL,
    available_at = CASE WHEN f.after_us > 0 THEN now() + f.after_us %s ELSE f.retry_at END
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS f(id, token, err, after_us, retry_at)
WHERE o.id = ANY($1::text[]) AND o.id = f.id AND o.lease_token = f.token`, t, microsSQL)
}

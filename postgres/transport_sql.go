package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// tnames holds the quoted identifiers of a Transport's statements.
type tnames struct {
	schema   string // quoted schema
	messages string // quoted schema.<prefix>_messages
	subs     string // quoted schema.<prefix>_subscriptions
	claimIdx string // quoted <prefix>_messages_claim_idx (unqualified)
	regIdx   string // the same, qualified, for to_regclass
	channel  string // NOTIFY channel, raw
	lockKey  string // advisory lock key text
}

func newTNames(o TransportOptions) tnames {
	return tnames{
		schema:   pgx.Identifier{o.Schema}.Sanitize(),
		messages: pgx.Identifier{o.Schema, o.TablePrefix + messagesSuffix}.Sanitize(),
		subs:     pgx.Identifier{o.Schema, o.TablePrefix + subsSuffix}.Sanitize(),
		claimIdx: pgx.Identifier{o.TablePrefix + queueIdxSuffix}.Sanitize(),
		regIdx:   pgx.Identifier{o.Schema, o.TablePrefix + queueIdxSuffix}.Sanitize(),
		channel:  channelName(o.Schema, o.TablePrefix+messagesSuffix),
		lockKey:  "postbus.setup." + o.Schema,
	}
}

// transportDDL is the transport's schema. Every queue's messages are rows
// of one table, told apart by the queue column; seq orders them (first in,
// first out among the rows available at once). available_at is when a row
// can next be claimed: its insert time, pushed forward by each claim (the
// lease) and back to now() by a release. lease_token names the claim that
// holds the row, lease_owner the Transport that claimed it (the key of its
// session advisory lock; see transport_owner.go), and is in no index.
// lease_owner came after v0.3.0: the ALTER TABLE adds it to a table made
// by an earlier version (a nullable column without default: a catalog
// change, no table rewrite), only when missing, so an up-to-date table
// takes no ACCESS EXCLUSIVE lock. Rows are deleted when acknowledged, so the table holds
// only what is queued or in flight, and the error and dead-letter queues
// (queue = their name) until someone consumes them.
func transportDDL(n tnames) []string {
	return []string{
		`CREATE SCHEMA IF NOT EXISTS ` + n.schema,
		`CREATE TABLE IF NOT EXISTS ` + n.messages + ` (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue        text COLLATE "C" NOT NULL,
	message_id   text NOT NULL,
	message_type text NOT NULL,
	headers      jsonb,
	body         bytea NOT NULL,
	envelope     bytea NOT NULL,
	enqueued_at  timestamptz NOT NULL DEFAULT now(),
	available_at timestamptz NOT NULL DEFAULT now(),
	lease_token  bigint,
	deliveries   integer NOT NULL DEFAULT 0,
	lease_owner  bigint
)`,
		`DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '` + n.messages + `'::regclass
		AND attname = 'lease_owner' AND NOT attisdropped) THEN
		ALTER TABLE ` + n.messages + ` ADD COLUMN lease_owner bigint;
	END IF;
END $$`,
		`CREATE INDEX IF NOT EXISTS ` + n.claimIdx + ` ON ` + n.messages + ` (queue, available_at, seq)`,
		`CREATE TABLE IF NOT EXISTS ` + n.subs + ` (
	event_type text COLLATE "C" NOT NULL,
	queue      text COLLATE "C" NOT NULL,
	PRIMARY KEY (event_type, queue)
)`,
	}
}

// asyncCommit, ANDed into a statement's WHERE clause, makes its autocommit
// transaction commit without waiting for the WAL flush (synchronous_commit
// off for that transaction only). Claims, lease extensions, releases and
// acknowledgements use it: a database crash can undo the last moments of
// them, which only delivers those messages again, as a crash of the
// consumer would. Sends, and acknowledgements inside an outbox handling,
// wait for the flush.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`

// tstatements is the SQL of every transport operation.
type tstatements struct {
	send      string // grouped insert of sends and publishes
	notify    string // wake-up of the queues a send inserted into
	subscribe string
	claim     string
	ack       string
	release   string
	extend    string
	held      string
	reap      string // frees the leased rows of vanished owners
	ackOne    string // the acknowledgement inside an outbox handling
}

func newTStatements(n tnames) tstatements {
	m := n.messages
	// Each input row is a send (queue set) or a publish (queue empty),
	// which becomes one row per subscribing queue.
	insert := fmt.Sprintf(`WITH u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bytea[])
		WITH ORDINALITY AS u(queue, id, type, headers, body, envelope, ord)
), ins AS (
	INSERT INTO %[1]s (queue, message_id, message_type, headers, body, envelope)
	SELECT r.queue, r.id, r.type, NULLIF(r.headers, '')::jsonb, r.body, r.envelope FROM (
		SELECT u.queue, u.id, u.type, u.headers, u.body, u.envelope, u.ord FROM u WHERE u.queue <> ''
		UNION ALL
		SELECT s.queue, u.id, u.type, u.headers, u.body, u.envelope, u.ord FROM u JOIN %[2]s s ON u.queue = '' AND s.event_type = u.type
	) r ORDER BY r.ord
	RETURNING queue
)
`, m, n.subs)
	// The inserted queues come back for the notification, which is a
	// statement of its own (see notify).
	send := insert + `SELECT DISTINCT queue FROM ins`
	return tstatements{
		send: send,
		// Not in the insert's transaction: PostgreSQL serializes the
		// commits of notifying transactions, WAL flush included, which
		// would cost every send a flush of its own. Sent after the insert
		// committed, with an asynchronous commit, it holds that lock only
		// briefly and never wakes a receiver before the rows are visible.
		notify:    `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q WHERE ` + asyncCommit,
		subscribe: `INSERT INTO ` + n.subs + ` (event_type, queue) SELECT e, $2 FROM unnest($1::text[]) AS e ON CONFLICT DO NOTHING`,
		claim: fmt.Sprintf(`WITH c AS (
	SELECT seq FROM %[1]s WHERE queue = $1 AND available_at <= now() AND %[3]s
	ORDER BY available_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS m SET available_at = now() + $3 %[2]s, lease_token = $4, lease_owner = NULLIF($5::bigint, 0),
	deliveries = m.deliveries + 1
FROM c WHERE m.seq = c.seq
RETURNING m.seq, m.message_id, m.body, m.envelope`, m, microsSQL, asyncCommit),
		ack: `DELETE FROM ` + m + ` AS m USING unnest($1::bigint[], $2::bigint[]) AS u(seq, token)
WHERE m.seq = u.seq AND m.lease_token = u.token AND ` + asyncCommit,
		release: `UPDATE ` + m + ` SET available_at = now(), lease_token = NULL, lease_owner = NULL WHERE seq = $1 AND lease_token = $2 AND ` + asyncCommit,
		// Rows locked by an outbox handling that is deleting them are
		// skipped, not waited for; held tells whether they are still ours.
		extend: fmt.Sprintf(`UPDATE %[1]s AS m SET available_at = now() + $3 %[2]s
FROM (SELECT x.seq FROM %[1]s x JOIN unnest($1::bigint[], $2::bigint[]) AS u(seq, token)
      ON x.seq = u.seq AND x.lease_token = u.token FOR UPDATE OF x SKIP LOCKED) l
WHERE m.seq = l.seq AND %[3]s RETURNING m.seq`, m, microsSQL, asyncCommit),
		held: `SELECT m.seq FROM ` + m + ` m JOIN unnest($1::bigint[], $2::bigint[]) AS u(seq, token)
ON m.seq = u.seq AND m.lease_token = u.token`,
		// The leased rows of the queue are a range of the claim index
		// (available_at > now(): a row is only ever in the future while
		// leased); those of another owner whose advisory lock nobody
		// holds are made available now, when the lease token is still the
		// one of that owner's claim (ownedToken). pg_locks is read only when such
		// rows exist (a hashed subplan runs on first use), once.
		reap: fmt.Sprintf(`UPDATE %[1]s AS m SET available_at = now(), lease_token = NULL, lease_owner = NULL
FROM (SELECT x.seq FROM %[1]s x
      WHERE x.queue = $1 AND x.available_at > now() AND x.lease_owner IS NOT NULL AND x.lease_owner <> $2
        AND x.lease_token & 4294967295 = x.lease_owner & 4294967295
        AND x.lease_owner NOT IN (
          SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
      FOR UPDATE OF x SKIP LOCKED) d
WHERE m.seq = d.seq AND %[2]s`, m, asyncCommit),
		ackOne: `DELETE FROM ` + m + ` WHERE seq = $1 AND lease_token = $2`,
	}
}

// TransportMigrations returns the DDL that Provision runs for the names in
// opts (Schema, TablePrefix; other fields are ignored), one statement per
// element, for teams that run their own migration tool. Every statement is
// idempotent. An invalid name is a *NameError.
func TransportMigrations(opts TransportOptions) ([]string, error) {
	o := TransportOptions{Schema: opts.Schema, TablePrefix: opts.TablePrefix}.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return transportDDL(newTNames(o)), nil
}

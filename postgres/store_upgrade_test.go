package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// v030OutgoingDDL is the scheduled-message table of v0.3.0 and its
// indexes, for the upgrade test.
func v030OutgoingDDL(schema string) []string {
	s := pgx.Identifier{schema}.Sanitize()
	t := pgx.Identifier{schema, "outgoing_messages"}.Sanitize()
	return []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE ` + t + ` (
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
	created_at   timestamptz NOT NULL DEFAULT now(),
	message_type text        COLLATE "C" NOT NULL DEFAULT ''
)`,
		`CREATE INDEX outgoing_messages_claim_idx ON ` + t + ` (transport, available_at, id)`,
		`CREATE INDEX outgoing_messages_due_idx ON ` + t + ` (due_at, id)`,
		`CREATE INDEX outgoing_messages_type_due_idx ON ` + t + ` (message_type, due_at, id)`,
	}
}

// Setup and a bus of this version on the table of v0.3.0 with rows in
// it: rows due, due later, failed with a backoff running, and leased by a
// v0.3.0 process that died (its lease written in the row). Each row is
// handed over once, none before its due time, the end of its backoff or
// the end of the dead process's lease; the leased row cannot be cancelled
// while that lease runs.
func TestScheduledUpgradeFromV030(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := ctxTimeout(t, 2*time.Minute)
	for _, ddl := range v030OutgoingDDL(schema) {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	table := pgx.Identifier{schema, "outgoing_messages"}.Sanitize()
	type row struct {
		id              string
		due, available  string // SQL offsets from now()
		failures        int
		leaseUntil, tok string
	}
	rows := []row{
		{id: "up-due-0", due: "-1 second", available: "-1 second"},
		{id: "up-due-1", due: "-1 second", available: "-1 second"},
		{id: "up-later", due: "1 second", available: "1 second"},
		{id: "up-failed", due: "-10 seconds", available: "2 seconds", failures: 1},
		{id: "up-leased", due: "-5 seconds", available: "2 seconds", leaseUntil: "2 seconds", tok: "dead-v030-process"},
	}
	notBefore := map[string]time.Time{}
	for _, r := range rows {
		env := bus.MarshalEnvelope(&bus.Envelope{ID: r.id, Type: storetest.TickType, Kind: bus.KindCommand,
			Body: []byte(`{"N":1}`), ContentType: "application/json", Source: "upgrade-test", Destination: storetest.Endpoint})
		var lease, prior, token any
		if r.tok != "" {
			lease, token = r.leaseUntil, r.tok
			prior = r.due
		}
		var avail time.Time
		err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, envelope, due_at, available_at, lease_until, lease_token,
			prior_available_at, transport, failures, last_error, message_type)
			VALUES ($1, 1, $2, now() + $3::interval, now() + $4::interval, now() + $5::interval, $6,
			now() + $7::interval, 'multiproc-sync', $8, CASE WHEN $8 > 0 THEN 'refused' ELSE '' END, 'multiproc.Tick')
			RETURNING available_at`, table),
			r.id, env, r.due, r.available, lease, token, prior, r.failures).Scan(&avail)
		if err != nil {
			t.Fatal(err)
		}
		notBefore[r.id] = avail
	}
	p, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.CancelOutgoing(ctx, "up-leased"); err != nil || ok {
		t.Fatalf("CancelOutgoing of a row whose v0.3.0 lease runs = %v, %v; want false, nil", ok, err)
	}
	tr := storetest.StartHandOvers(t, p)
	tr.Wait(t, len(rows), time.Minute)
	time.Sleep(time.Second) // room for a duplicate to show
	tr.Check(t, len(rows), func(id string) time.Time { return notBefore[id] })
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left in the table (%v), want none", left, err)
	}
}

package mysql_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

// leasedOutgoingDDL is the scheduled-message table as the versions that
// leased claimed rows made it (lease_until, lease_token and
// prior_available_at written by every claim), for the upgrade test.
func leasedOutgoingDDL(table string) string {
	return "CREATE TABLE `" + table + "`" + ` (
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
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
}

// Setup and a bus of this version on a table of the version that leased
// claimed rows, with rows in it: due, due later, failed with a backoff
// running, and leased by a process of that version that died (its lease
// written in the row). Each row is handed over once, none before its due
// time, the end of its backoff or the end of the dead process's lease; the
// leased row cannot be cancelled while that lease runs.
func TestScheduledUpgradeFromLeasedRows(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := t.Context()
	table := freshTable()
	t.Cleanup(func() { dropTables(db, table) })
	if _, err := db.ExecContext(ctx, leasedOutgoingDDL(table)); err != nil {
		t.Fatal(err)
	}
	type row struct {
		id             string
		due, available int // milliseconds from the server's now
		failures       int
		lease          int // the lease's end, milliseconds from now; 0: none
	}
	rows := []row{
		{id: "up-due-0", due: -1000, available: -1000},
		{id: "up-due-1", due: -1000, available: -1000},
		{id: "up-later", due: 1000, available: 1000},
		{id: "up-failed", due: -10000, available: 2000, failures: 1},
		{id: "up-leased", due: -5000, available: 2000, lease: 2000},
	}
	notBefore := map[string]time.Time{}
	for _, r := range rows {
		env := bus.MarshalEnvelope(&bus.Envelope{ID: r.id, Type: storetest.TickType, Kind: bus.KindCommand,
			Body: []byte(`{"N":1}`), ContentType: "application/json", Source: "upgrade-test", Destination: storetest.Endpoint})
		var lease, token, prior any
		if r.lease != 0 {
			lease, token, prior = r.lease, []byte("dead-process-token"), r.due
		}
		_, err := db.ExecContext(ctx, "INSERT INTO `"+table+"` (id, kind, envelope, due_at, available_at, lease_until, lease_token,"+
			" prior_available_at, transport, message_type, failures, last_error, created_at) VALUES (?, 1, ?,"+
			" UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,"+
			" UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,"+
			" ?, ?, ?, IF(? > 0, 'refused', ''), UTC_TIMESTAMP(6))",
			[]byte(r.id), env, r.due, r.available, lease, token, prior, []byte(storetest.TransportIdentity), []byte(storetest.TickType), r.failures, r.failures)
		if err != nil {
			t.Fatal(err)
		}
		var avail int64
		if err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', available_at) FROM `"+table+
			"` WHERE id = ?", []byte(r.id)).Scan(&avail); err != nil {
			t.Fatal(err)
		}
		notBefore[r.id] = time.UnixMicro(avail)
	}
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.CancelOutgoing(ctx, "up-leased"); err != nil || ok {
		t.Fatalf("CancelOutgoing of a row whose lease runs = %v, %v; want false, nil", ok, err)
	}
	rec := storetest.StartHandOvers(t, p)
	rec.Wait(t, len(rows), time.Minute)
	time.Sleep(time.Second) // room for a duplicate to show
	rec.Check(t, len(rows), func(id string) time.Time { return notBefore[id] })
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+table+"`").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left in the table (%v), want none", left, err)
	}
}

package mysql_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/mysql"
)

// proxiedDB opens a handle of the test's own whose connections go through
// a fault proxy to the test server, and returns both.
func proxiedDB(t *testing.T, maxConns int) (*sql.DB, *faultproxy.Proxy) {
	t.Helper()
	testDB(t) // skips when the server is down
	cfg, err := mysqldriver.ParseDSN(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Listen(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg.Addr = p.Addr()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestStoreOutgoingWhoseCommitIsInDoubt: the connection ends while a
// StoreOutgoing waits for its commit to be confirmed (a fault proxy
// relays the autocommitted INSERT or the COMMIT and drops the server's
// reply, or drops the INSERT). The store checks on another connection
// which rows were stored: all of them, and the call returns nil (the
// message will be delivered, so the caller must not be told it failed);
// none, and it returns the error; some (the others were stored before),
// and it stores the missing ones again.
func TestStoreOutgoingWhoseCommitIsInDoubt(t *testing.T) {
	t.Parallel()
	isCommit := func(b []byte) bool { return bytes.HasSuffix(b, []byte("\x03COMMIT")) } // COM_QUERY COMMIT
	for _, c := range []struct {
		name      string
		rows      int // up to 500: one INSERT, autocommitted; more: a transaction
		stored    int // rows of the call stored before it
		fault     faultproxy.Fault
		onCommit  bool // the trap waits for COMMIT, else for the last row's ID
		wantErr   bool
		wantFound bool
	}{
		{name: "insert's reply lost", rows: 1, fault: faultproxy.LoseReply, wantFound: true},
		{name: "commit's reply lost", rows: 501, fault: faultproxy.LoseReply, onCommit: true, wantFound: true},
		{name: "insert lost", rows: 1, fault: faultproxy.LoseRequest, wantErr: true},
		{name: "insert lost, some stored before", rows: 2, stored: 1, fault: faultproxy.LoseRequest, wantFound: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			check := newStore(t, testDB(t), mysql.Options{})
			db, proxy := proxiedDB(t, 4)
			store, err := mysql.New(db, mysql.Options{Table: check.Table()[1 : len(check.Table())-1]})
			if err != nil {
				t.Fatal(err)
			}
			ctx := drivertest.Ctx(t, time.Minute)
			if err := store.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			ns := bustest.Namespace()
			rows := make([]bus.OutgoingMessage, c.rows)
			for i := range rows {
				id := fmt.Sprintf("%s-%d", ns, i)
				rows[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: "t", Envelope: []byte(id), DueAt: time.Now().Add(time.Hour), Transport: "t"}
			}
			if c.stored > 0 {
				if err := check.StoreOutgoing(ctx, rows[:c.stored]); err != nil {
					t.Fatal(err)
				}
			}
			last := []byte(rows[len(rows)-1].ID)
			match := func(b []byte) bool { return bytes.Contains(b, last) }
			if c.onCommit {
				match = isCommit
			}
			sprung := proxy.Trap(match, c.fault)
			err = store.StoreOutgoing(ctx, rows)
			select {
			case <-sprung:
			default:
				t.Fatalf("the fault never happened (StoreOutgoing = %v)", err)
			}
			if c.wantErr != (err != nil) {
				t.Errorf("StoreOutgoing = %v, want an error: %v", err, c.wantErr)
			}
			for _, id := range []string{rows[0].ID, rows[len(rows)-1].ID} {
				if _, found, err := check.GetScheduled(ctx, id); err != nil || found != c.wantFound {
					t.Errorf("row %s stored: %v, %v; want %v", id, found, err, c.wantFound)
				}
			}
		})
	}
}

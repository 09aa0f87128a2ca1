package postgres_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/postgres"
)

// TestStoreOutgoingWhoseCommitIsInDoubt: the connection ends while a
// StoreOutgoing waits for its commit to be confirmed (a fault proxy
// relays the statement or COMMIT and drops the server's reply, or drops
// the statement). The store checks on another connection which rows were
// stored: all of them, and the call returns nil (the message will be
// delivered, so the caller must not be told it failed); none, and it
// returns the error; some (the others were stored before), and it stores
// the missing ones again.
func TestStoreOutgoingWhoseCommitIsInDoubt(t *testing.T) {
	t.Parallel()
	isCommit := func(b []byte) bool { return len(b) > 0 && b[0] == 'Q' && bytes.Contains(b, []byte("commit\x00")) }
	for _, c := range []struct {
		name      string
		rows      int // 1: one INSERT, autocommitted; 1000 or more: COPY in a transaction
		stored    int // rows of the call stored before it
		fault     faultproxy.Fault
		onCommit  bool // the trap waits for COMMIT, else for the last row's ID
		wantErr   bool
		wantFound bool
	}{
		{name: "insert's reply lost", rows: 1, fault: faultproxy.LoseReply, wantFound: true},
		{name: "commit's reply lost", rows: 1000, fault: faultproxy.LoseReply, onCommit: true, wantFound: true},
		{name: "insert lost", rows: 1, fault: faultproxy.LoseRequest, wantErr: true},
		{name: "insert lost, some stored before", rows: 2, stored: 1, fault: faultproxy.LoseRequest, wantFound: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			schema := freshSchema(t, testPool(t))
			check := newStore(t, testPool(t), postgres.Options{Schema: schema})
			pool, proxy := proxiedPool(t, 4)
			store, err := postgres.New(pool, postgres.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			ns := bustest.Namespace()
			rows := make([]bus.OutgoingMessage, c.rows)
			for i := range rows {
				id := fmt.Sprintf("%s-%d", ns, i)
				rows[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: "t", Envelope: []byte(id), DueAt: time.Now().Add(time.Hour), Transport: "t"}
			}
			ctx := ctxTimeout(t, time.Minute)
			if c.stored > 0 {
				if err := check.StoreOutgoing(ctx, rows[:c.stored]); err != nil {
					t.Fatal(err)
				}
			}
			if err := pool.Ping(ctx); err != nil { // a connection ready, so the trap sees only the store's statements
				t.Fatal(err)
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

package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/mysql"
)

func claimRow(id string, due time.Time) bus.OutgoingMessage {
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: storetest.TickType, Envelope: []byte(`{}`), DueAt: due, Transport: storetest.TransportIdentity}
}

func ids(msgs []bus.OutgoingMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func claimsOf(msgs []bus.OutgoingMessage) []bus.Claim {
	out := make([]bus.Claim, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Claim()
	}
	return out
}

// An open claim holds its rows and no other: the next row to fall due,
// which a locking range scan would lock as the end of its range, can be
// cancelled at once, and a cancel or send-now of a held row says false at
// once, in a caller's transaction too.
func TestOpenClaimHoldsOnlyItsRows(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := t.Context()
	p := newStore(t, db, mysql.Options{})
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{claimRow("due", time.Now().Add(-time.Second)),
		claimRow("next", time.Now().Add(time.Hour)), claimRow("later", time.Now().Add(2*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	held, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 10, time.Hour)
	if err != nil || len(held) != 1 || held[0].ID != "due" {
		t.Fatalf("claim = %v, %v; want [due]", ids(held), err)
	}
	start := time.Now()
	if ok, err := p.CancelOutgoing(ctx, "next"); err != nil || !ok {
		t.Errorf("CancelOutgoing(next) during the claim = %v, %v; want true", ok, err)
	}
	if ok, err := p.SendNow(ctx, "later"); err != nil || !ok {
		t.Errorf("SendNow(later) during the claim = %v, %v; want true", ok, err)
	}
	if ok, err := p.CancelOutgoing(ctx, "due"); err != nil || ok {
		t.Errorf("CancelOutgoing of the held row = %v, %v; want false", ok, err)
	}
	tx, err := db.BeginTx(ctx, nil) // REPEATABLE READ, the server's default
	if err != nil {
		t.Fatal(err)
	}
	ok, joined, err := p.CancelOutgoingInTx(mysql.WithTx(ctx, tx), "due")
	_ = tx.Rollback()
	if err != nil || !joined || ok {
		t.Errorf("CancelOutgoingInTx of the held row = %v, %v, %v; want false, true, nil", ok, joined, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the cancels took %v: they waited for a held row", el)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(held)); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 1", n, err)
	}
	if ok, err := p.CancelOutgoing(ctx, "later"); err != nil || !ok {
		t.Fatalf("CancelOutgoing(later) = %v, %v; want true", ok, err)
	}
}

// Open claims take at most half the pool: with two connections, a second
// claim while the first is open returns no rows, at once, and the pool
// still serves other calls; once the first claim is settled the rows are
// claimed. Close rolls back a claim left open: its rows are claimable, and
// its token settles nothing.
func TestOpenClaimsTakeHalfThePoolAndCloseEndsThem(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := t.Context()
	p := newStore(t, db, mysql.Options{})
	var rows []bus.OutgoingMessage
	for i := range 4 {
		rows = append(rows, claimRow(fmt.Sprint("r", i), time.Now().Add(-time.Second)))
	}
	if err := p.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	first, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 2, time.Hour)
	if err != nil || len(first) != 2 {
		t.Fatalf("first claim = %v, %v; want 2 rows", ids(first), err)
	}
	start := time.Now()
	second, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 2, time.Hour)
	if err != nil || len(second) != 0 {
		t.Fatalf("second claim with the slot taken = %v, %v; want no rows", ids(second), err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("the second claim waited %v for a slot", el)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Ping(pctx); err != nil {
		t.Fatalf("Ping with a claim open: %v", err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(first)); err != nil || n != 2 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 2", n, err)
	}
	left, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 10, time.Hour)
	if err != nil || len(left) != 2 {
		t.Fatalf("claim after the first was settled = %v, %v; want 2 rows", ids(left), err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(left)); err != nil || n != 0 {
		t.Fatalf("DeleteOutgoing of a claim Close ended = %d, %v; want 0", n, err)
	}
	again, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 10, time.Hour)
	if err != nil || len(again) != 2 {
		t.Fatalf("claim after Close = %v, %v; want the 2 rows", ids(again), err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(again)); err != nil || n != 2 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 2", n, err)
	}
}

// A store of an ID whose row a claim holds (a send retried while the
// first is being delivered) does not wait for the claim: that row is left
// as it is, as a stored ID is, and the other rows of the call are stored.
func TestStoreOfAHeldIDDoesNotWait(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := t.Context()
	p := newStore(t, db, mysql.Options{})
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{claimRow("held", time.Now().Add(-time.Second))}); err != nil {
		t.Fatal(err)
	}
	held, err := p.ClaimDueOutgoing(ctx, storetest.TransportIdentity, time.Now(), 10, time.Hour)
	if err != nil || len(held) != 1 {
		t.Fatalf("claim = %v, %v; want [held]", ids(held), err)
	}
	start := time.Now()
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{claimRow("held", time.Now().Add(time.Hour)),
		claimRow("new", time.Now().Add(time.Hour))}); err != nil {
		t.Fatalf("StoreOutgoing with a held ID: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the store took %v: it waited for the held row", el)
	}
	if n, err := p.Len(ctx); err != nil || n != 2 {
		t.Fatalf("Len = %d, %v; want 2 (held, new)", n, err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(held)); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 1", n, err)
	}
	if ok, err := p.CancelOutgoing(ctx, "new"); err != nil || !ok {
		t.Fatalf("CancelOutgoing(new) = %v, %v; want true", ok, err)
	}
	if n, err := p.Len(ctx); err != nil || n != 0 {
		t.Fatalf("Len = %d, %v; want 0", n, err)
	}
}

package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// handle runs one handling of id at endpoint and commits it; it reports
// whether the endpoint had handled id already.
func handle(t *testing.T, p *sqlite.Persistence, endpoint, id string) bool {
	t.Helper()
	tx, handled, err := p.BeginHandling(t.Context(), endpoint, id)
	if err != nil {
		t.Fatalf("BeginHandling(%s, %s): %v", endpoint, id, err)
	}
	if handled {
		if tx != nil {
			t.Fatalf("BeginHandling(%s, %s) returned a transaction for a handled message", endpoint, id)
		}
		return true
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return false
}

func inboxLen(t *testing.T, p *sqlite.Persistence) int {
	t.Helper()
	var n int
	if err := p.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM outgoing_messages_inbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInboxPurgeDeletesOnlyOldRows(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx := t.Context()
	for i := range 5 {
		handle(t, p, "orders", fmt.Sprintf("m%d", i))
	}
	handle(t, p, "billing", "m0") // another endpoint: a row of its own
	// m0..m2 of orders were handled two hours ago.
	if _, err := p.DB().ExecContext(ctx, "UPDATE outgoing_messages_inbox SET handled_at = handled_at - ? WHERE endpoint = 'orders' AND message_id IN ('m0', 'm1', 'm2')",
		(2 * time.Hour).Nanoseconds()); err != nil {
		t.Fatal(err)
	}
	if n, err := p.PurgeInbox(ctx, time.Hour, 0); err != nil || n != 0 {
		t.Fatalf("PurgeInbox with limit 0 = %d, %v; want 0", n, err)
	}
	for _, want := range []int{2, 1, 0} {
		if n, err := p.PurgeInbox(ctx, time.Hour, 2); err != nil || n != want {
			t.Fatalf("PurgeInbox = %d, %v; want %d", n, err, want)
		}
	}
	if n := inboxLen(t, p); n != 3 {
		t.Fatalf("%d inbox rows left, want 3", n)
	}
	// Purged messages count as new again; the kept ones are still handled.
	for id, want := range map[string]bool{"m0": false, "m2": false, "m3": true, "m4": true} {
		if got := handle(t, p, "orders", id); got != want {
			t.Errorf("after the purge, handled(orders, %s) = %v, want %v", id, got, want)
		}
	}
	if !handle(t, p, "billing", "m0") {
		t.Error("the purge removed a recent row of another endpoint")
	}
}

func TestHandlingTransaction(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx := t.Context()
	tx, handled, err := p.BeginHandling(ctx, "orders", "m1")
	if err != nil || handled {
		t.Fatalf("BeginHandling = %v, %v", handled, err)
	}
	txCtx := tx.Context(ctx)
	sqlTx, ok := sqlite.Tx(txCtx)
	if !ok {
		t.Fatal("Tx found no transaction in the handling's context")
	}
	if _, err := sqlTx.ExecContext(txCtx, "CREATE TABLE business (key TEXT)"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	rows := []bus.OutgoingMessage{
		{ID: "now", Kind: bus.KindEvent, Envelope: []byte("x"), Delay: time.Nanosecond, Transport: "t"},
		{ID: "later", Kind: bus.KindCommand, Envelope: []byte("x"), Delay: time.Hour, Transport: "t"},
	}
	if err := tx.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if n, err := p.Len(ctx); err != nil || n != 0 || inboxLen(t, p) != 0 {
		t.Fatalf("after rollback: %d rows (%v), %d inbox rows; want none", n, err, inboxLen(t, p))
	}

	// Rolled back: the message is new again.
	tx, handled, err = p.BeginHandling(ctx, "orders", "m1")
	if err != nil || handled {
		t.Fatalf("BeginHandling after rollback = %v, %v", handled, err)
	}
	if err := tx.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil", err)
	}
	got, err := p.ClaimDueOutgoing(ctx, "t", time.Now(), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "now" {
		t.Fatalf("claimed %+v, %v; want only the row due now", got, err)
	}
	if n, err := p.DeleteOutgoing(ctx, []bus.Claim{got[0].Claim()}); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v", n, err)
	}
	next, ok, err := p.NextDueOutgoing(ctx, "t")
	if err != nil || !ok || next.Before(before.Add(time.Hour)) || next.After(time.Now().Add(time.Hour)) {
		t.Errorf("the delayed row is due %v (%v, %v); want an hour after it was stored", next, ok, err)
	}
	if !handle(t, p, "orders", "m1") {
		t.Error("a committed message was not recognised as handled")
	}
	if handle(t, p, "billing", "m1") {
		t.Error("another endpoint's handling of the message counted as this endpoint's")
	}
}

func TestTxWithoutTransaction(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	if _, ok := sqlite.Tx(t.Context()); ok {
		t.Error("Tx found a transaction in a bare context")
	}
	if _, ok := sqlite.Tx(sqlite.WithTx(t.Context(), nil)); ok {
		t.Error("Tx reported a nil transaction")
	}
	stored, err := p.StoreOutgoingInCallerTx(t.Context(), []bus.OutgoingMessage{{ID: "x", Kind: bus.KindCommand, Envelope: []byte("x")}})
	if stored || err != nil {
		t.Errorf("StoreOutgoingInCallerTx without a transaction = %v, %v; want false, nil", stored, err)
	}
}

func TestCallerTxIsRefusedWhenUnusable(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	other := openAt(t, filepath.Join(t.TempDir(), "other.db"), sqlite.Options{})
	ctx := t.Context()
	row := []bus.OutgoingMessage{{ID: "x", Kind: bus.KindCommand, Envelope: []byte("x"), Delay: time.Nanosecond, Transport: "t"}}

	done, err := p.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := done.Commit(); err != nil {
		t.Fatal(err)
	}
	stored, err := p.StoreOutgoingInCallerTx(sqlite.WithTx(ctx, done), row)
	var te *sqlite.TxError
	if stored || !errors.As(err, &te) || !errors.Is(err, sqlite.ErrUnusableTx) || !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("a finished transaction: %v, %v; want a *TxError wrapping sql.ErrTxDone", stored, err)
	}

	foreign, err := other.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored, err = p.StoreOutgoingInCallerTx(sqlite.WithTx(ctx, foreign), row)
	if stored || !errors.As(err, &te) || te.Err != nil {
		t.Errorf("a transaction on another file: %v, %v; want a *TxError", stored, err)
	}
	if err := foreign.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*sqlite.Persistence{p, other} {
		if n, err := s.Len(ctx); err != nil || n != 0 {
			t.Errorf("a refused transaction stored %d rows (%v)", n, err)
		}
	}
}

// TestCallerTxCommitWakesOwnWatcher: a commit on the store's own connection
// does not change PRAGMA data_version, so WatchDue must learn of a row
// stored in a caller's transaction from the store itself.
func TestCallerTxCommitWakesOwnWatcher(t *testing.T) {
	t.Parallel()
	p := openAt(t, filepath.Join(t.TempDir(), "wake.db"), sqlite.Options{WatchInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, _, err := p.NextDueOutgoing(ctx, "t"); err != nil { // as the dispatcher does
		t.Fatal(err)
	}
	wakes := make(chan time.Time, 16)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.WatchDue(watchCtx, func(due time.Time) { wakes <- due }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("WatchDue = %v", err)
		}
	}()
	tx, err := p.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := []bus.OutgoingMessage{{ID: "caller", Kind: bus.KindCommand, Envelope: []byte("x"), Delay: time.Nanosecond, Transport: "t"}}
	if stored, err := p.StoreOutgoingInCallerTx(sqlite.WithTx(ctx, tx), row); err != nil || !stored {
		t.Fatalf("StoreOutgoingInCallerTx = %v, %v", stored, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakes:
	case <-ctx.Done():
		t.Fatal("the commit of a caller's transaction never woke the watcher")
	}
}

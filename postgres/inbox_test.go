package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

func TestInboxPurgeDeletesOnlyOldRows(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	for _, id := range []string{"old-1", "old-2", "old-3", "new-1"} {
		tx, handled, err := store.BeginHandling(ctx, "orders", id)
		if err != nil || handled {
			t.Fatalf("BeginHandling(%s) = %v, %v", id, handled, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE `+store.InboxTable()+` SET handled_at = now() - interval '2 hours' WHERE message_id LIKE 'old-%'`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.PurgeInbox(ctx, time.Hour, 2); err != nil || n != 2 {
		t.Fatalf("PurgeInbox(1h, 2) = %d, %v; want 2 (the limit)", n, err)
	}
	if n, err := store.PurgeInbox(ctx, time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("second PurgeInbox = %d, %v; want the last old row", n, err)
	}
	if n, err := store.PurgeInbox(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("third PurgeInbox = %d, %v; want 0", n, err)
	}
	if _, handled, err := store.BeginHandling(ctx, "orders", "new-1"); err != nil || !handled {
		t.Errorf("the recent row was purged: BeginHandling(new-1) = %v, %v", handled, err)
	}
	tx, handled, err := store.BeginHandling(ctx, "orders", "old-1")
	if err != nil || handled {
		t.Fatalf("a purged message is still recognised: %v, %v", handled, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHandlingTransaction: the inbox row is per endpoint, the handling's
// transaction is in its Context, and nothing of a rolled-back handling
// remains.
func TestHandlingTransaction(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	if _, ok := postgres.Tx(ctx); ok {
		t.Fatal("Tx outside a handling reported a transaction")
	}
	tx, handled, err := store.BeginHandling(ctx, "orders", "m1")
	if err != nil || handled {
		t.Fatalf("BeginHandling = %v, %v", handled, err)
	}
	pgTx, ok := postgres.Tx(tx.Context(ctx))
	if !ok || pgTx == nil {
		t.Fatal("Tx(handling ctx) found no transaction")
	}
	row := bus.OutgoingMessage{ID: "out-1", Kind: bus.KindEvent, Envelope: []byte("x"), Delay: time.Nanosecond}
	if err := tx.StoreOutgoing(ctx, []bus.OutgoingMessage{row}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedRows(t, pool, store); n != 0 {
		t.Errorf("%d rows after a rollback", n)
	}
	// The same message at another endpoint is another handling.
	tx, handled, err = store.BeginHandling(ctx, "orders", "m1")
	if err != nil || handled {
		t.Fatalf("BeginHandling after a rollback = %v, %v", handled, err)
	}
	if err := tx.StoreOutgoing(ctx, []bus.OutgoingMessage{row}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil", err)
	}
	if n := storedRows(t, pool, store); n != 1 {
		t.Errorf("%d rows after the commit, want 1", n)
	}
	other, handled, err := store.BeginHandling(ctx, "billing", "m1")
	if err != nil || handled {
		t.Fatalf("BeginHandling at another endpoint = %v, %v", handled, err)
	}
	_ = other.Rollback(ctx)
	if _, handled, err := store.BeginHandling(ctx, "orders", "m1"); err != nil || !handled {
		t.Errorf("BeginHandling of a handled message = %v, %v; want handled", handled, err)
	}
	// Bad rows are refused before anything is sent.
	tx, _, err = store.BeginHandling(ctx, "orders", "m2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: ""}}); !errors.Is(err, postgres.ErrInvalidRow) {
		t.Errorf("StoreOutgoing of a row without ID = %v, want ErrInvalidRow", err)
	}
}

func TestStoreOutgoingInCallerTxWithoutTx(t *testing.T) {
	t.Parallel()
	store := newStore(t, testPool(t), postgres.Options{})
	row := bus.OutgoingMessage{ID: "x", Kind: bus.KindEvent, Envelope: []byte("x")}
	if stored, err := store.StoreOutgoingInCallerTx(t.Context(), []bus.OutgoingMessage{row}); stored || err != nil {
		t.Errorf("StoreOutgoingInCallerTx without a transaction = %v, %v; want false, nil", stored, err)
	}
}

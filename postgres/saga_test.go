package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// TestSagaInHandlingTransaction: saga writes made through the context of an
// outbox handling commit and roll back with it, and a conflict inside it
// leaves the transaction usable.
func TestSagaInHandlingTransaction(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	saga := "saga_" + bustest.Namespace()
	inst := bus.SagaInstance{Saga: saga, Correlation: "c", ID: "i1", State: []byte(`{"N":0}`), Timeouts: []string{"t1"}}
	if err := store.InsertSaga(ctx, inst); err != nil {
		t.Fatal(err)
	}

	handle := func(msgID string, fn func(ctx context.Context) error, commit bool) {
		t.Helper()
		h, handled, err := store.BeginHandling(ctx, "ep", msgID)
		if err != nil || handled {
			t.Fatalf("BeginHandling = %v, %v", handled, err)
		}
		defer func() { _ = h.Rollback(ctx) }()
		if err := fn(h.Context(ctx)); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := h.Commit(ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
		} else if err := h.Rollback(ctx); err != nil {
			t.Fatalf("Rollback: %v", err)
		}
	}
	write := func(state string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			// A conflict first: the transaction must survive it.
			if err := store.InsertSaga(ctx, bus.SagaInstance{Saga: saga, Correlation: "c", ID: "x", State: []byte(`{}`)}); !errors.Is(err, bus.ErrSagaConflict) {
				t.Errorf("InsertSaga of an existing instance in the handling = %v, want a conflict", err)
			}
			cur, ok, err := store.LoadSaga(ctx, saga, "c")
			if err != nil || !ok {
				t.Fatalf("LoadSaga in the handling = %v, %v", ok, err)
			}
			stale := cur
			stale.Version = 99
			if err := store.UpdateSaga(ctx, stale); !errors.Is(err, bus.ErrSagaConflict) {
				t.Errorf("stale UpdateSaga in the handling = %v, want a conflict", err)
			}
			cur.State = []byte(state)
			if err := store.UpdateSaga(ctx, cur); err != nil {
				return err
			}
			return store.InsertSaga(ctx, bus.SagaInstance{Saga: saga, Correlation: "new-" + state, ID: "n", State: []byte(state)})
		}
	}

	handle("m1", write(`{"N":1}`), false)
	got, _, err := store.LoadSaga(ctx, saga, "c")
	if err != nil || got.Version != 1 || string(got.State) != `{"N":0}` {
		t.Fatalf("after a rolled-back handling the instance is %+v, %v; want version 1 unchanged", got, err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, `new-{"N":1}`); ok {
		t.Fatal("an instance inserted in a rolled-back handling exists")
	}

	handle("m2", write(`{"N":2}`), true)
	got, _, err = store.LoadSaga(ctx, saga, "c")
	if err != nil || got.Version != 2 || string(got.State) != `{"N":2}` || len(got.Timeouts) != 1 {
		t.Fatalf("after a committed handling the instance is %+v, %v; want version 2 with the new state", got, err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, `new-{"N":2}`); !ok {
		t.Fatal("an instance inserted in a committed handling is missing")
	}

	// The caller's own transaction (WithTx) is used too.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := store.DeleteSaga(postgres.WithTx(ctx, tx), saga, "c", 2); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, "c"); !ok {
		t.Fatal("a delete in an uncommitted caller transaction is visible outside it")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, "c"); !ok {
		t.Fatal("a delete in a rolled-back caller transaction removed the instance")
	}
}

// TestSagaStateIsQueryableJSON: users can read the state with ->>.
func TestSagaStateIsQueryableJSON(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{SagaTable: "my_sagas"})
	ctx := ctxTimeout(t, time.Minute)
	if err := store.InsertSaga(ctx, bus.SagaInstance{Saga: "orders", Correlation: "o-1", ID: "i", State: []byte(`{"Status":"paid"}`)}); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT state->>'Status' FROM `+store.SagaTable()+` WHERE saga = 'orders'`).Scan(&status); err != nil || status != "paid" {
		t.Fatalf("state->>'Status' = %q, %v; want paid", status, err)
	}
}

func TestInvalidSagaTableIsANameError(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"saga table", strings.Repeat("s", 64)} {
		_, err := postgres.New(lazyPool(t), postgres.Options{SagaTable: name})
		var nameErr *postgres.NameError
		if !errors.As(err, &nameErr) || nameErr.Field != "SagaTable" {
			t.Errorf("New with SagaTable %q = %v; want a *NameError on SagaTable", name, err)
		}
		if _, err := postgres.MigrationsForOptions(postgres.Options{SagaTable: name}); !errors.Is(err, postgres.ErrInvalidName) {
			t.Errorf("MigrationsForOptions with SagaTable %q = %v; want ErrInvalidName", name, err)
		}
	}
}

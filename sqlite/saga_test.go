package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// TestSagaInHandlingTransaction: saga writes made through the context of an
// outbox handling commit and roll back with it, and a conflict inside it
// leaves the transaction usable.
func TestSagaInHandlingTransaction(t *testing.T) {
	t.Parallel()
	store := openTemp(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const saga = "orders"
	inst := bus.SagaInstance{Saga: saga, Correlation: "c", ID: "i1", State: []byte(`{"N":0}`), Timeouts: []string{"t1"}}
	if err := store.InsertSaga(ctx, inst); err != nil {
		t.Fatal(err)
	}

	handle := func(msgID, state string, commit bool) {
		t.Helper()
		h, handled, err := store.BeginHandling(ctx, "ep", msgID)
		if err != nil || handled {
			t.Fatalf("BeginHandling = %v, %v", handled, err)
		}
		defer func() { _ = h.Rollback(ctx) }()
		hctx := h.Context(ctx)
		// A conflict first: the transaction must survive it.
		if err := store.InsertSaga(hctx, bus.SagaInstance{Saga: saga, Correlation: "c", ID: "x", State: []byte(`{}`)}); !errors.Is(err, bus.ErrSagaConflict) {
			t.Errorf("InsertSaga of an existing instance in the handling = %v, want a conflict", err)
		}
		cur, ok, err := store.LoadSaga(hctx, saga, "c")
		if err != nil || !ok {
			t.Fatalf("LoadSaga in the handling = %v, %v", ok, err)
		}
		stale := cur
		stale.Version = 99
		if err := store.UpdateSaga(hctx, stale); !errors.Is(err, bus.ErrSagaConflict) {
			t.Errorf("stale UpdateSaga in the handling = %v, want a conflict", err)
		}
		cur.State = []byte(state)
		if err := store.UpdateSaga(hctx, cur); err != nil {
			t.Fatalf("UpdateSaga in the handling: %v", err)
		}
		if err := store.InsertSaga(hctx, bus.SagaInstance{Saga: saga, Correlation: "new-" + msgID, ID: "n", State: []byte(state)}); err != nil {
			t.Fatalf("InsertSaga in the handling: %v", err)
		}
		if commit {
			if err := h.Commit(ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
		} else if err := h.Rollback(ctx); err != nil {
			t.Fatalf("Rollback: %v", err)
		}
	}

	handle("m1", `{"N":1}`, false)
	got, _, err := store.LoadSaga(ctx, saga, "c")
	if err != nil || got.Version != 1 || string(got.State) != `{"N":0}` {
		t.Fatalf("after a rolled-back handling the instance is %+v, %v; want version 1 unchanged", got, err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, "new-m1"); ok {
		t.Fatal("an instance inserted in a rolled-back handling exists")
	}

	handle("m2", `{"N":2}`, true)
	got, _, err = store.LoadSaga(ctx, saga, "c")
	if err != nil || got.Version != 2 || string(got.State) != `{"N":2}` || len(got.Timeouts) != 1 {
		t.Fatalf("after a committed handling the instance is %+v, %v; want version 2 with the new state", got, err)
	}
	if _, ok, _ := store.LoadSaga(ctx, saga, "new-m2"); !ok {
		t.Fatal("an instance inserted in a committed handling is missing")
	}
}

// TestSagaStateIsQueryableJSON: the state is TEXT that json_extract reads.
func TestSagaStateIsQueryableJSON(t *testing.T) {
	t.Parallel()
	store := openTemp(t)
	ctx := t.Context()
	if err := store.InsertSaga(ctx, bus.SagaInstance{Saga: "orders", Correlation: "o-1", ID: "i", State: []byte(`{"Status":"paid"}`),
		Timeouts: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	var status string
	var n int
	err := store.DB().QueryRowContext(ctx, "SELECT json_extract(state, '$.Status'), json_array_length(timeouts) FROM "+
		store.SagaTable()+" WHERE saga = 'orders'").Scan(&status, &n)
	if err != nil || status != "paid" || n != 2 {
		t.Fatalf("json_extract = %q, %d timeouts, %v; want paid, 2", status, n, err)
	}
}

// TestSagaTableSurvivesSetupAgain: Setup is idempotent with the saga table.
func TestSagaTableSurvivesSetupAgain(t *testing.T) {
	t.Parallel()
	store := openTemp(t)
	ctx := t.Context()
	if err := store.InsertSaga(ctx, bus.SagaInstance{Saga: "s", Correlation: "c", ID: "i", State: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := store.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.LoadSaga(ctx, "s", "c"); !ok || err != nil {
		t.Fatalf("after Setup again: found %v, %v", ok, err)
	}
}

var _ bus.SagaStore = (*sqlite.Persistence)(nil)

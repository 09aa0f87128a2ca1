package mongodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mongodb"
)

// newSagaStore returns a set-up store on collections of a random name,
// dropped when the test ends.
func newSagaStore(t *testing.T) *mongodb.Persistence {
	t.Helper()
	name := randomName("sagas_")
	p := storeOn(t, testEnv.client, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []string{name, name + "_claims", name + "_sagas"} {
			if err := testEnv.client.Database(testDatabase).Collection(c).Drop(ctx); err != nil {
				t.Errorf("drop %s: %v", c, err)
			}
		}
	})
	if err := p.Setup(testCtx(t)); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return p
}

func TestSagaConformance(t *testing.T) {
	t.Parallel()
	store := newSagaStore(t)
	bustest.SagaTests(t, func(t *testing.T) bus.SagaStore { return store })
}

// TestSagaKeepsOneDocumentPerInstance: earlier writes keep only their _id
// (so a stale writer cannot store their seq again), and a completed
// instance leaves only its mark with a state.
func TestSagaKeepsOneDocumentPerInstance(t *testing.T) {
	t.Parallel()
	store := newSagaStore(t)
	ctx := testCtx(t)
	inst := bus.SagaInstance{Saga: "orders", Correlation: "o:1", ID: "i", State: []byte(`{}`)}
	if err := store.InsertSaga(ctx, inst); err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= 3; v++ {
		inst.Version = v
		if err := store.UpdateSaga(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int64 {
		n, err := store.SagaCollection().CountDocuments(ctx, bson.D{{Key: "saga", Value: "orders"},
			{Key: "state", Value: bson.D{{Key: "$exists", Value: true}}}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d documents with a state for one instance after four writes, want 1", n)
	}
	// Another instance whose key would collide if the parts were joined
	// without their lengths.
	if err := store.InsertSaga(ctx, bus.SagaInstance{Saga: "orders:o", Correlation: "1", ID: "j", State: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteSaga(ctx, "orders", "o:1", 4); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d documents with a state after completion, want the mark alone", n)
	}
	if err := store.DeleteSaga(ctx, "orders", "o:1", 5); !errors.Is(err, bus.ErrSagaConflict) {
		t.Fatalf("DeleteSaga of the completed instance = %v, want a conflict", err)
	}
	if got, ok, err := store.LoadSaga(ctx, "orders:o", "1"); err != nil || !ok || got.ID != "j" || got.Version != 1 {
		t.Fatalf("the other instance is %+v, %v, %v", got, ok, err)
	}
}

func TestSagaCollectionMustDiffer(t *testing.T) {
	t.Parallel()
	_, err := mongodb.New(testEnv.client.Database(testDatabase), mongodb.Options{Collection: "a", SagaCollection: "a"})
	if !errors.Is(err, mongodb.ErrInvalidOptions) {
		t.Fatalf("New with SagaCollection = Collection: %v, want ErrInvalidOptions", err)
	}
}

package mongodb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mongodb"
)

// newRecurringStore returns a set-up store on collections of a random
// name, dropped when the test ends.
func newRecurringStore(t *testing.T) *mongodb.Persistence {
	t.Helper()
	name := randomName("recurring_")
	p := storeOn(t, testEnv.client, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []string{name, name + "_claims", name + "_recurring"} {
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

func TestRecurringConformance(t *testing.T) {
	t.Parallel()
	bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore { return newRecurringStore(t) })
}

// TestRecurringAdvanceLeftPendingIsFinishedByTheNextRead: an advance whose
// process stops after the commit point (the record's compare-and-set)
// leaves its rows pending in the record; the next read of the schedule
// stores them and cancels what it named, once.
func TestRecurringAdvanceLeftPendingIsFinishedByTheNextRead(t *testing.T) {
	t.Parallel()
	store := newRecurringStore(t)
	ctx := testCtx(t)
	name := randomName("rec-")
	if _, _, err := store.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := outgoing(name+"-old", now.Add(time.Hour))
	mustStore(t, store, old)
	due := outgoing(name+"-due", now.Add(-time.Second))
	adv := bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: due.DueAt, Ticks: []time.Time{due.DueAt},
		Store: []bus.OutgoingMessage{due}, Cancel: []string{old.ID}}
	if err := mongodb.CommitAdvanceOnly(ctx, store, adv); err != nil {
		t.Fatalf("commit without finishing: %v", err)
	}
	if got := mustClaim(t, store, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %d rows of an unfinished advance, want none", len(got))
	}
	// A racing advance from the same Last loses.
	if ok, err := store.AdvanceRecurring(ctx, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: now, Ticks: []time.Time{now}}); err != nil || ok {
		t.Fatalf("advance from the old Last = %v, %v; want false", ok, err)
	}
	rec, ok, err := store.LoadRecurring(ctx, name)
	if err != nil || !ok || !rec.Last.Equal(due.DueAt) {
		t.Fatalf("LoadRecurring = %+v, %v, %v; want Last %v", rec, ok, err, due.DueAt)
	}
	got := mustClaim(t, store, 10, time.Minute)
	if len(got) != 1 || got[0].ID != due.ID {
		t.Fatalf("claimed %v after the read, want only %s (the old row cancelled)", got, due.ID)
	}
	mustDelete(t, store, got)
	// Finishing it again (a second reader) stores nothing again.
	if _, _, err := store.LoadRecurring(ctx, name); err != nil {
		t.Fatal(err)
	}
	assertNoDocuments(t, store)
	if ok, err := store.DeleteRecurring(ctx, name, nil); err != nil || !ok {
		t.Fatalf("DeleteRecurring = %v, %v", ok, err)
	}
}

func TestRecurringCollectionMustDiffer(t *testing.T) {
	t.Parallel()
	_, err := mongodb.New(testEnv.client.Database(testDatabase), mongodb.Options{Collection: "a", RecurringCollection: "a_sagas"})
	if !errors.Is(err, mongodb.ErrInvalidOptions) {
		t.Fatalf("New with RecurringCollection = SagaCollection: %v, want ErrInvalidOptions", err)
	}
}

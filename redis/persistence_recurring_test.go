package redis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

func TestPersistenceRecurring(t *testing.T) {
	rdb := connect(t)
	bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

func TestClusterRecurring(t *testing.T) {
	rdb := connectCluster(t)
	bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore {
		return newPersistence(t, rdb, redis.PersistenceOptions{})
	})
}

// An advance whose writer died after the commit, before storing its rows,
// is finished by the next process that reads the record once the advance
// is 5 s old: its row is stored, and the record is not changed before.
func TestPersistenceRecurringPendingAdvanceIsFinishedByAReader(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	prefix := drivertest.Unique("pbtest:")
	dead := newPersistence(t, rdb, redis.PersistenceOptions{Prefix: prefix})
	alive, err := redis.NewPersistence(rdb, redis.PersistenceOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := drivertest.Ctx(t, time.Minute)
	if _, _, err := dead.DeclareRecurring(ctx, bus.RecurringRecord{Name: "nightly", Fingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	redis.StopAfterCommit(dead, errors.New("killed"))
	tick := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	row := bus.OutgoingMessage{ID: "nightly-1", Envelope: []byte("x"), DueAt: tick, Transport: "tr"}
	adv := bus.RecurringAdvance{Name: "nightly", Generation: 1, Fingerprint: "fp", Last: tick, Ticks: []time.Time{tick},
		Store: []bus.OutgoingMessage{row}}
	committed := time.Now()
	if ok, err := dead.AdvanceRecurring(ctx, adv); ok || err == nil {
		t.Fatalf("AdvanceRecurring stopped after the commit = %v, %v; want false and the error", ok, err)
	}
	if _, found, _ := alive.NextDueOutgoing(ctx, "tr"); found {
		t.Fatal("the row is stored although the writer stopped before storing it")
	}
	// The same step, planned by another process, finds the record moved on
	// once the pending advance is finished.
	if ok, err := alive.AdvanceRecurring(ctx, adv); err != nil || ok {
		t.Fatalf("a second AdvanceRecurring from the same Last = %v, %v; want false", ok, err)
	}
	if waited := time.Since(committed); waited < 4*time.Second {
		t.Errorf("the pending advance was finished after %v, before its writer's grace of 5 s", waited)
	}
	rec, ok, err := alive.LoadRecurring(ctx, "nightly")
	if err != nil || !ok || !rec.Last.Equal(tick) {
		t.Fatalf("LoadRecurring = %+v, %v, %v; want Last %v", rec, ok, err, tick)
	}
	if next, found, err := alive.NextDueOutgoing(ctx, "tr"); err != nil || !found || !next.Equal(tick) {
		t.Fatalf("NextDueOutgoing = %v, %v, %v; want the advance's row at %v", next, found, err, tick)
	}
	if ok, err := alive.CancelOutgoing(ctx, "nightly-1"); err != nil || !ok {
		t.Fatalf("CancelOutgoing = %v, %v", ok, err)
	}
	if _, err := alive.DeleteRecurring(ctx, "nightly", nil); err != nil {
		t.Fatal(err)
	}
}

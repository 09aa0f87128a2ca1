package bustest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/postbus/bus"
)

// SagaStoreFactory returns a saga store for one test case. Cases run in
// parallel, each under saga names of its own (Namespace), so one database
// serves them all.
type SagaStoreFactory func(t *testing.T) bus.SagaStore

// SagaTests runs the saga store contract against stores made by newStore:
// one instance per (saga, correlation) even when inserts race, optimistic
// concurrency on updates and deletes, completion, a 1 MiB state, and
// isolation of saga names.
func SagaTests(t *testing.T, newStore SagaStoreFactory) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s bus.SagaStore, saga string)
	}{
		{"InsertThenLoadKeepsEveryField", testSagaRoundTrip},
		{"LoadOfMissingInstance", testSagaMissing},
		{"RacingInsertsCreateOneInstance", testSagaInsertRace},
		{"StaleUpdateIsAConflict", testSagaConflict},
		{"UpdateOfMissingInstanceIsAConflict", testSagaUpdateMissing},
		{"DeleteRemovesAndChecksVersion", testSagaDelete},
		{"ConcurrentIncrementsLoseNoUpdate", testSagaIncrements},
		{"LargeStateRoundTrips", testSagaLargeState},
		{"NamesAreIsolated", testSagaNames},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore(t), "saga_"+strings.ReplaceAll(Namespace(), "-", "_"))
		})
	}
}

func instance(saga, corr, state string) bus.SagaInstance {
	return bus.SagaInstance{Saga: saga, Correlation: corr, ID: "id-" + corr, State: []byte(state)}
}

func mustLoad(t *testing.T, s bus.SagaStore, saga, corr string) bus.SagaInstance {
	t.Helper()
	inst, ok, err := s.LoadSaga(ctxT(t), saga, corr)
	if err != nil || !ok {
		t.Fatalf("LoadSaga(%s, %s) = found %v, %v; want the instance", saga, corr, ok, err)
	}
	return inst
}

func mustInsert(t *testing.T, s bus.SagaStore, inst bus.SagaInstance) {
	t.Helper()
	if err := s.InsertSaga(ctxT(t), inst); err != nil {
		t.Fatalf("InsertSaga: %v", err)
	}
}

func wantConflict(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, bus.ErrSagaConflict) {
		t.Fatalf("%s = %v, want an error wrapping bus.ErrSagaConflict", op, err)
	}
}

func testSagaRoundTrip(t *testing.T, s bus.SagaStore, saga string) {
	in := instance(saga, "order-1", `{"ID":"order-1","Paid":false,"Note":"ünïcode ✓"}`)
	in.Timeouts = []string{"t1", "t2"}
	mustInsert(t, s, in)
	got := mustLoad(t, s, saga, "order-1")
	if got.Saga != saga || got.Correlation != "order-1" || got.ID != in.ID || got.Version != 1 ||
		!bytes.Equal(got.State, in.State) || !slices.Equal(got.Timeouts, in.Timeouts) {
		t.Fatalf("loaded %+v, want %+v at version 1", got, in)
	}
	got.State, got.Timeouts = []byte(`{"ID":"order-1","Paid":true}`), nil
	if err := s.UpdateSaga(ctxT(t), got); err != nil {
		t.Fatalf("UpdateSaga: %v", err)
	}
	again := mustLoad(t, s, saga, "order-1")
	if again.Version != 2 || string(again.State) != `{"ID":"order-1","Paid":true}` || len(again.Timeouts) != 0 || again.ID != in.ID {
		t.Fatalf("after update loaded %+v, want version 2, the new state, no timeouts, the same ID", again)
	}
}

func testSagaMissing(t *testing.T, s bus.SagaStore, saga string) {
	_, ok, err := s.LoadSaga(ctxT(t), saga, "nobody")
	if err != nil || ok {
		t.Fatalf("LoadSaga of a missing instance = found %v, %v; want false, nil", ok, err)
	}
}

func testSagaInsertRace(t *testing.T, s bus.SagaStore, saga string) {
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			errs[i] = s.InsertSaga(ctxT(t), instance(saga, "raced", fmt.Sprintf(`{"N":%d}`, i)))
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("inserts %d and %d both created the instance", won, i)
		case err == nil:
			won = i
		default:
			wantConflict(t, "a losing InsertSaga", err)
		}
	}
	if won < 0 {
		t.Fatal("no insert created the instance")
	}
	if got := mustLoad(t, s, saga, "raced"); string(got.State) != fmt.Sprintf(`{"N":%d}`, won) || got.Version != 1 {
		t.Fatalf("stored %s at version %d, want the winner's state at version 1", got.State, got.Version)
	}
}

func testSagaConflict(t *testing.T, s bus.SagaStore, saga string) {
	mustInsert(t, s, instance(saga, "c", `{"N":0}`))
	a, b := mustLoad(t, s, saga, "c"), mustLoad(t, s, saga, "c")
	a.State = []byte(`{"N":1}`)
	if err := s.UpdateSaga(ctxT(t), a); err != nil {
		t.Fatalf("first UpdateSaga: %v", err)
	}
	b.State = []byte(`{"N":2}`)
	wantConflict(t, "UpdateSaga on a stale version", s.UpdateSaga(ctxT(t), b))
	if got := mustLoad(t, s, saga, "c"); string(got.State) != `{"N":1}` || got.Version != 2 {
		t.Fatalf("stored %s at version %d, want the first update at version 2", got.State, got.Version)
	}
	wantConflict(t, "InsertSaga of an existing instance", s.InsertSaga(ctxT(t), instance(saga, "c", `{}`)))
}

func testSagaUpdateMissing(t *testing.T, s bus.SagaStore, saga string) {
	inst := instance(saga, "ghost", `{}`)
	inst.Version = 1
	wantConflict(t, "UpdateSaga of a missing instance", s.UpdateSaga(ctxT(t), inst))
	if _, ok, _ := s.LoadSaga(ctxT(t), saga, "ghost"); ok {
		t.Fatal("UpdateSaga of a missing instance created it")
	}
}

func testSagaDelete(t *testing.T, s bus.SagaStore, saga string) {
	mustInsert(t, s, instance(saga, "d", `{}`))
	wantConflict(t, "DeleteSaga with a stale version", s.DeleteSaga(ctxT(t), saga, "d", 7))
	if err := s.DeleteSaga(ctxT(t), saga, "d", 1); err != nil {
		t.Fatalf("DeleteSaga: %v", err)
	}
	if _, ok, err := s.LoadSaga(ctxT(t), saga, "d"); ok || err != nil {
		t.Fatalf("after DeleteSaga, LoadSaga = found %v, %v", ok, err)
	}
	wantConflict(t, "DeleteSaga of a deleted instance", s.DeleteSaga(ctxT(t), saga, "d", 1))
	// Started again, the instance is new: version 1, its own ID.
	again := instance(saga, "d", `{}`)
	again.ID = "second"
	mustInsert(t, s, again)
	if got := mustLoad(t, s, saga, "d"); got.Version != 1 || got.ID != "second" {
		t.Fatalf("restarted instance is %+v, want version 1 and ID second", got)
	}
}

// testSagaIncrements has writers add one to a counter with load, update
// and a reload on conflict: the final count is every increment.
func testSagaIncrements(t *testing.T, s bus.SagaStore, saga string) {
	const writers, each = 6, 20
	mustInsert(t, s, instance(saga, "counter", "0"))
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				for {
					inst, ok, err := s.LoadSaga(ctxT(t), saga, "counter")
					if err != nil || !ok {
						t.Errorf("LoadSaga: found %v, %v", ok, err)
						return
					}
					n, _ := strconv.Atoi(string(inst.State))
					inst.State = []byte(strconv.Itoa(n + 1))
					err = s.UpdateSaga(ctxT(t), inst)
					if err == nil {
						break
					}
					if !errors.Is(err, bus.ErrSagaConflict) {
						t.Errorf("UpdateSaga: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	got := mustLoad(t, s, saga, "counter")
	if string(got.State) != strconv.Itoa(writers*each) || got.Version != writers*each+1 {
		t.Fatalf("counter is %s at version %d, want %d at version %d", got.State, got.Version, writers*each, writers*each+1)
	}
}

func testSagaLargeState(t *testing.T, s bus.SagaStore, saga string) {
	big := []byte(`{"Data":"` + strings.Repeat("x", 1<<20) + `"}`)
	in := instance(saga, "large", string(big))
	mustInsert(t, s, in)
	got := mustLoad(t, s, saga, "large")
	if !bytes.Equal(got.State, big) {
		t.Fatalf("a %d-byte state came back as %d bytes", len(big), len(got.State))
	}
	got.State = append(big[:len(big)-2:len(big)-2], `y"}`...)
	if err := s.UpdateSaga(ctxT(t), got); err != nil {
		t.Fatalf("UpdateSaga of a large state: %v", err)
	}
	if again := mustLoad(t, s, saga, "large"); !bytes.Equal(again.State, got.State) {
		t.Fatal("the updated large state did not round-trip")
	}
}

func testSagaNames(t *testing.T, s bus.SagaStore, saga string) {
	other := saga + "_other"
	mustInsert(t, s, instance(saga, "shared", `{"Saga":1}`))
	mustInsert(t, s, instance(other, "shared", `{"Saga":2}`))
	if got := mustLoad(t, s, other, "shared"); string(got.State) != `{"Saga":2}` {
		t.Fatalf("saga %s has state %s, want its own", other, got.State)
	}
	if err := s.DeleteSaga(ctxT(t), saga, "shared", 1); err != nil {
		t.Fatalf("DeleteSaga: %v", err)
	}
	if _, ok, _ := s.LoadSaga(ctxT(t), other, "shared"); !ok {
		t.Fatal("deleting one saga's instance removed another saga's")
	}
}

package mongodb_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// newRecurringStore returns a set-up store on collections of a random
// name, dropped when the test ends.
func newRecurringStore(t *testing.T) *mongodb.Persistence {
	t.Helper()
	p := storeOn(t, testEnv.client, dropAtEnd(t, randomName("recurring_")))
	if err := p.Setup(testCtx(t)); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return p
}

// dropAtEnd returns name, after arranging for the collections of a store
// named name to be dropped when the test ends.
func dropAtEnd(t *testing.T, name string) string {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []string{name, name + "_claims", name + "_recurring", name + "_recurring_runs", name + "_sagas", name + "_failed"} {
			if err := testEnv.client.Database(testDatabase).Collection(c).Drop(ctx); err != nil {
				t.Errorf("drop %s: %v", c, err)
			}
		}
	})
	return name
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

// recurringWriteID is the _id of the write seq of the schedule name.
func recurringWriteID(name string, seq int64) string {
	return fmt.Sprintf("%d:%s:%d", len(name), name, seq)
}

func claimNames(t *testing.T, p *mongodb.Persistence, now time.Time) []string {
	t.Helper()
	recs, err := p.ClaimDueRecurring(testCtx(t), now, 10, time.Minute)
	if err != nil {
		t.Fatalf("ClaimDueRecurring: %v", err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	return names
}

// TestRecurringWritesOfEarlierVersionsLoadAndRun: the writes of versions
// before runtime schedules (no spec, due, runs, skipped or alive) load as
// declared schedules never due, Setup adds the due index over them, and
// the schedule goes on: advanced, never claimed, then redefined at
// runtime and claimed.
func TestRecurringWritesOfEarlierVersionsLoadAndRun(t *testing.T) {
	t.Parallel()
	p := storeOn(t, testEnv.client, dropAtEnd(t, randomName("recurring_")))
	ctx := testCtx(t)
	name := randomName("old-")
	last := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	for seq := int64(1); seq <= 2; seq++ {
		_, err := p.RecurringCollection().InsertOne(ctx, bson.D{
			{Key: "_id", Value: recurringWriteID(name, seq)}, {Key: "name", Value: name}, {Key: "seq", Value: seq},
			{Key: "fingerprint", Value: "fp"}, {Key: "schedule", Value: "@every 1m"}, {Key: "generation", Value: int64(1)},
			{Key: "paused", Value: false}, {Key: "last", Value: last.UnixNano()}, {Key: "ticks", Value: bson.A{last.UnixNano()}},
			{Key: "written_at", Value: time.Now()},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatalf("Setup over an earlier version's writes: %v", err)
	}
	assertIndex(t, p.RecurringCollection(), "postbus_recurring_due_name")
	rec, ok, err := p.LoadRecurring(ctx, name)
	if err != nil || !ok || rec.Fingerprint != "fp" || !rec.Last.Equal(last) || len(rec.Ticks) != 1 ||
		rec.Spec != nil || !rec.Due.IsZero() || rec.Runs != 0 || rec.Skipped != 0 || !rec.Alive.IsZero() {
		t.Fatalf("LoadRecurring = %+v, %v, %v; want the earlier write, declared, never due", rec, ok, err)
	}
	next := last.Add(time.Minute)
	if ok, err := p.AdvanceRecurring(ctx, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: last,
		Last: next, Ticks: []time.Time{next}, Due: next, Runs: 1}); err != nil || !ok {
		t.Fatalf("AdvanceRecurring = %v, %v", ok, err)
	}
	if got := claimNames(t, p, next.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("claimed %v, a declared schedule", got)
	}
	now := time.Now().UTC()
	if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp2", Schedule: "@every 1m",
		Spec: []byte(`{}`), Due: now}); err != nil {
		t.Fatal(err)
	}
	if got := claimNames(t, p, now); len(got) != 1 || got[0] != name {
		t.Fatalf("claimed %v, want the schedule made runtime", got)
	}
	if rec, _, _ := p.LoadRecurring(ctx, name); rec.Runs != 1 || rec.Generation != 2 || !rec.Due.Equal(now.Add(time.Minute)) {
		t.Fatalf("claimed record = %+v; want Runs kept, generation 2, due a lease ahead", rec)
	}
}

func assertIndex(t *testing.T, c *mongo.Collection, name string) {
	t.Helper()
	specs, err := c.Indexes().ListSpecifications(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name == name {
			return
		}
	}
	t.Errorf("no index %s on %s", name, c.Name())
}

// TestRecurringClaimSkipsEarlierWrites: a write that is no longer its
// schedule's latest but still carries a due that passed (its writer
// stopped before removing it) is never claimed, and loses its due.
func TestRecurringClaimSkipsEarlierWrites(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	ctx := testCtx(t)
	name := randomName("rec-")
	now := time.Now().UTC()
	past := now.Add(-time.Second)
	if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp", Spec: []byte(`{}`), Due: past}); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	if ok, err := p.AdvanceRecurring(ctx, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: now, Due: later}); err != nil || !ok {
		t.Fatalf("AdvanceRecurring = %v, %v", ok, err)
	}
	first := recurringWriteID(name, 1)
	if n := countDue(t, p, first); n != 0 {
		t.Fatalf("the first write still has its due after the advance")
	}
	// As if the advance's writer had stopped before removing it.
	if _, err := p.RecurringCollection().UpdateOne(ctx, bson.D{{Key: "_id", Value: first}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "due", Value: past.UnixNano()}}}}); err != nil {
		t.Fatal(err)
	}
	if got := claimNames(t, p, now); len(got) != 0 {
		t.Fatalf("claimed %v from an earlier write; the record is due %v", got, later)
	}
	if n := countDue(t, p, first); n != 0 {
		t.Fatalf("the earlier write found by a claim keeps its due")
	}
	if rec, _, _ := p.LoadRecurring(ctx, name); !rec.Due.Equal(later) || rec.Last.IsZero() {
		t.Fatalf("record after the claim = %+v; want the advance's", rec)
	}
	if got := claimNames(t, p, later); len(got) != 1 {
		t.Fatalf("claimed %v at the record's due, want it", got)
	}
}

// countDue returns 1 when the write id has a due, else 0.
func countDue(t *testing.T, p *mongodb.Persistence, id string) int64 {
	t.Helper()
	n, err := p.RecurringCollection().CountDocuments(testCtx(t),
		bson.D{{Key: "_id", Value: id}, {Key: "due", Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRecurringPageTakesThePrefixLiterally: a prefix's '.' matches a dot
// only, and a name's earlier writes and its pending advance do not change
// the page.
func TestRecurringPageTakesThePrefixLiterally(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	ctx := testCtx(t)
	base := randomName("pg-")
	for _, n := range []string{"a.b-1", "axb-1", "a.b-2", "a.b", "a.c"} {
		if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: base + n, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: base + "a.b-1", Fingerprint: "fp2"}); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now().UTC().Truncate(time.Millisecond)
	if err := mongodb.CommitAdvanceOnly(ctx, p, bus.RecurringAdvance{Name: base + "a.b-2", Last: stepped}); err != nil {
		t.Fatal(err)
	}
	page, err := p.ListRecurringPage(ctx, base+"a.b", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page {
		got = append(got, strings.TrimPrefix(r.Name, base))
	}
	if want := []string{"a.b", "a.b-1", "a.b-2"}; !slices.Equal(got, want) || page[1].Fingerprint != "fp2" ||
		!page[2].Last.Equal(stepped) {
		t.Fatalf("page = %v (%+v), want %v with a.b-1's latest write and a.b-2's advance", got, page, want)
	}
	if page, err := p.ListRecurringPage(ctx, base+"a.", base+"a.b-1", 1); err != nil || len(page) != 1 || page[0].Name != base+"a.b-2" {
		t.Fatalf("page after a.b-1 = %+v, %v; want a.b-2", page, err)
	}
}

type runtimeTick struct{ Tenant string }

// TestRuntimeRecurringEachTickOnceOnTwoDispatchers: a schedule set at
// runtime by a send-only bus is stepped by two dispatchers sharing the
// store, and over five seconds each of its ticks is handled once, never
// before the tick.
func TestRuntimeRecurringEachTickOnceOnTwoDispatchers(t *testing.T) {
	t.Parallel()
	name := dropAtEnd(t, randomName("runtime_"))
	tr := bus.NewMemoryTransport()
	var (
		mu    sync.Mutex
		ticks = map[time.Time]int{}
		early []string
	)
	handle := func(ctx context.Context, m runtimeTick) error {
		at := time.Now()
		env := bus.IncomingMessage(ctx)
		tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
		if err != nil {
			return bus.Unrecoverable(fmt.Errorf("tick header %q: %w", env.Header(bus.HeaderRecurringTick), err))
		}
		mu.Lock()
		defer mu.Unlock()
		ticks[tick]++
		if at.Before(tick) {
			early = append(early, fmt.Sprintf("%v handled at %v", tick, at))
		}
		return nil
	}
	for range 2 {
		bustest.StartBus(t, bus.Config{Endpoint: "rt-worker", Transport: tr, Persistence: storeOn(t, testEnv.client, name),
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}}, func(b *bus.Bus) {
			if err := bus.Handle(b, handle); err != nil {
				t.Fatal(err)
			}
		})
	}
	ops := bustest.StartBus(t, bus.Config{Endpoint: "rt-ops", Transport: tr, Persistence: storeOn(t, testEnv.client, name),
		SendOnly: true}, nil)
	ctx := testCtx(t)
	schedule := randomName("tenant-")
	if err := ops.SetRecurring(ctx, bus.RecurringSpec{Name: schedule, Schedule: "@every 1s", Message: runtimeTick{Tenant: "acme"},
		Options: []bus.Option{bus.To("rt-worker")}}); err != nil {
		t.Fatalf("SetRecurring: %v", err)
	}
	set := time.Now()
	end := set.Add(5 * time.Second)
	var want []time.Time // the ticks surely after the first step
	for tick := set.Truncate(time.Second).Add(time.Second); !tick.After(end); tick = tick.Add(time.Second) {
		if tick.Sub(set) >= 500*time.Millisecond {
			want = append(want, tick.UTC())
		}
	}
	// Wait for the last tick wanted, then a while for any duplicate.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := ticks[want[len(want)-1]]
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if err := ops.DeleteRecurring(ctx, schedule); err != nil {
		t.Fatalf("DeleteRecurring: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tick := range want {
		if ticks[tick] != 1 {
			t.Errorf("tick %v handled %d times, want once", tick, ticks[tick])
		}
	}
	for tick, n := range ticks {
		if n != 1 {
			t.Errorf("tick %v handled %d times", tick, n)
		}
	}
	if len(early) > 0 {
		t.Errorf("handled before their tick: %v", early)
	}
}

// insertOldWrites inserts the writes from..to of the schedule name as an
// earlier process made them at writtenAt.
func insertOldWrites(t *testing.T, p *mongodb.Persistence, name string, from, to int64, writtenAt time.Time) {
	t.Helper()
	var docs []any
	for seq := from; seq <= to; seq++ {
		docs = append(docs, bson.D{
			{Key: "_id", Value: recurringWriteID(name, seq)}, {Key: "name", Value: name}, {Key: "seq", Value: seq},
			{Key: "fingerprint", Value: "fp"}, {Key: "generation", Value: int64(1)}, {Key: "paused", Value: false},
			{Key: "last", Value: int64(seq)}, {Key: "ticks", Value: bson.A{}}, {Key: "written_at", Value: writtenAt},
		})
	}
	if _, err := p.RecurringCollection().InsertMany(testCtx(t), docs); err != nil {
		t.Fatal(err)
	}
}

func countWrites(t *testing.T, p *mongodb.Persistence, name string) int64 {
	t.Helper()
	n, err := p.RecurringCollection().CountDocuments(testCtx(t), bson.D{{Key: "name", Value: name}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRecurringWritesAreTrimmedAsTheyGo: a schedule's writer removes its
// earlier writes once a day old every 256 writes, without waiting for
// Setup; the younger ones and the latest stay.
func TestRecurringWritesAreTrimmedAsTheyGo(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	ctx := testCtx(t)
	name := randomName("trim-")
	insertOldWrites(t, p, name, 1, 200, time.Now().Add(-49*time.Hour))
	insertOldWrites(t, p, name, 201, 254, time.Now().Add(-time.Hour))
	// Write 255 trims nothing; 256 trims the 200 a day old.
	for _, w := range []struct {
		seq, want int64
		paused    bool
	}{{255, 255, true}, {256, 56, false}} {
		if ok, err := p.SetRecurringPaused(ctx, name, w.paused, time.Now()); err != nil || !ok {
			t.Fatalf("SetRecurringPaused = %v, %v", ok, err)
		}
		if n := countWrites(t, p, name); n != w.want {
			t.Fatalf("%d writes after the write %d, want %d", n, w.seq, w.want)
		}
	}
	rec, ok, err := p.LoadRecurring(ctx, name)
	if err != nil || !ok || rec.Fingerprint != "fp" {
		t.Fatalf("LoadRecurring after the trim = %+v, %v, %v", rec, ok, err)
	}
}

// TestRecurringSetupRemovesDayOldWrites: Setup removes the writes a day
// old that are no schedule's latest, and keeps each latest, however old.
func TestRecurringSetupRemovesDayOldWrites(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	a, b := randomName("old-a-"), randomName("old-b-")
	insertOldWrites(t, p, a, 1, 3, time.Now().Add(-49*time.Hour))
	insertOldWrites(t, p, b, 1, 2, time.Now().Add(-49*time.Hour))
	insertOldWrites(t, p, b, 3, 4, time.Now())
	if err := p.Setup(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if na, nb := countWrites(t, p, a), countWrites(t, p, b); na != 1 || nb != 2 {
		t.Fatalf("writes left: %d of a, %d of b; want 1 and 2", na, nb)
	}
	for _, name := range []string{a, b} {
		if _, ok, err := p.LoadRecurring(testCtx(t), name); err != nil || !ok {
			t.Fatalf("LoadRecurring(%s) = %v, %v after Setup", name, ok, err)
		}
	}
}

// TestRecurringPageSkipsManyEarlierWrites: a name with more earlier
// writes than a page reads through in one go is listed once, with its
// latest write, and the page goes on after it.
func TestRecurringPageSkipsManyEarlierWrites(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	ctx := testCtx(t)
	base := randomName("skip-")
	insertOldWrites(t, p, base+"b", 1, 100, time.Now())
	for _, n := range []string{"a", "c", "d"} {
		if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: base + n, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := p.ListRecurringPage(ctx, base, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page {
		got = append(got, strings.TrimPrefix(r.Name, base))
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) || page[1].Last.UnixNano() != 100 {
		t.Fatalf("page = %v (%+v), want a, b (its write 100), c", got, page)
	}
}

// BenchmarkRecurringRuntime times ClaimDueRecurring (10 due among 10,000
// runtime schedules) and ListRecurringPage (a page of 100 of them).
func BenchmarkRecurringRuntime(b *testing.B) {
	const stored, due = 10_000, 10
	p := storeOn(b, testEnv.client, randomName("bench_recurring_"))
	ctx := testCtx(b)
	b.Cleanup(func() {
		for _, c := range []*mongo.Collection{p.RecurringCollection(), p.Collection()} {
			_ = c.Drop(context.Background())
		}
	})
	if err := p.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	base := randomName("b-")
	var docs []any
	for i := range stored {
		at := now.Add(time.Hour)
		if i < due {
			at = now.Add(-time.Second)
		}
		name := fmt.Sprintf("%s-%05d", base, i)
		docs = append(docs, bson.D{{Key: "_id", Value: recurringWriteID(name, 1)}, {Key: "name", Value: name},
			{Key: "seq", Value: int64(1)}, {Key: "fingerprint", Value: "fp"}, {Key: "generation", Value: int64(1)},
			{Key: "paused", Value: false}, {Key: "last", Value: int64(0)}, {Key: "ticks", Value: bson.A{}},
			{Key: "spec", Value: []byte(`{}`)}, {Key: "due", Value: at.UnixNano()}, {Key: "written_at", Value: time.Now()}})
	}
	if _, err := p.RecurringCollection().InsertMany(ctx, docs); err != nil {
		b.Fatal(err)
	}
	b.Run("claim", func(b *testing.B) {
		const lease = time.Millisecond
		at := now
		for b.Loop() {
			recs, err := p.ClaimDueRecurring(ctx, at, 500, lease)
			if err != nil || len(recs) != due {
				b.Fatalf("claimed %d, %v; want %d", len(recs), err, due)
			}
			at = at.Add(2 * lease) // the claimed ones are due again
		}
	})
	b.Run("page", func(b *testing.B) {
		for b.Loop() {
			if page, err := p.ListRecurringPage(ctx, base, "", 100); err != nil || len(page) != 100 {
				b.Fatalf("page of %d, %v", len(page), err)
			}
		}
	})
}

// TestRecurringEmptySpecIsARuntimeSchedule: an empty Spec is a runtime
// schedule's (not nil, a declared one's): it loads as empty and is claimed.
func TestRecurringEmptySpecIsARuntimeSchedule(t *testing.T) {
	t.Parallel()
	p := newRecurringStore(t)
	ctx := testCtx(t)
	name := randomName("empty-")
	now := time.Now().UTC()
	if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp", Spec: []byte{}, Due: now}); err != nil {
		t.Fatal(err)
	}
	if rec, ok, err := p.LoadRecurring(ctx, name); err != nil || !ok || rec.Spec == nil || len(rec.Spec) != 0 {
		t.Fatalf("LoadRecurring = %+v, %v, %v; want an empty, non-nil Spec", rec, ok, err)
	}
	if got := claimNames(t, p, now); len(got) != 1 {
		t.Fatalf("claimed %v, want the schedule with an empty Spec", got)
	}
}

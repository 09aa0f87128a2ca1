package bustest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// RecurringStoreFactory returns a new, empty, isolated recurring store for
// one test case.
type RecurringStoreFactory func(t *testing.T) bus.RecurringStore

// RecurringTests runs the recurring-schedule store contract against stores
// made by newStore: declarations and their generations, the
// compare-and-set of AdvanceRecurring with its rows, pause and resume, and
// deletion, and for a RecurringRuntimeStore the runtime fields, claims
// and paging. Each case uses schedule names of its own and leaves neither a
// record nor a row behind. Times are truncated to the millisecond, the
// precision every store must keep.
func RecurringTests(t *testing.T, newStore RecurringStoreFactory) {
	cases := []storeCase[bus.RecurringStore]{
		{"DeclareInsertsOnceAndKeepsTheRecord", testRecDeclare},
		{"DeclareWithAnotherFingerprintRaisesTheGeneration", testRecRedeclare},
		{"AdvanceIsACompareAndSet", testRecAdvanceCAS},
		{"AdvanceStoresAndCancelsRows", testRecAdvanceRows},
		{"AdvanceDoesNotCancelALeasedRow", testRecAdvanceLeased},
		{"RacingAdvancesMakeOneStep", testRecAdvanceRace},
		{"PauseAndResume", testRecPause},
		{"DeleteRemovesTheRecordAndCancelsRows", testRecDelete},
		{"ListReturnsEveryRecordByName", testRecList},
		{"AdvanceKeepsTheLatestLivenessMark", testRecAlive},
		{"AdvanceFailsOnceAPauseLanded", testRecPauseRacesStep},
		{"AdvanceFailsWithAnotherDefinition", testRecFingerprintCAS},
		{"DeleteNeverLetsAGenerationBeReused", testRecDeleteKeepsGeneration},
	}
	cases = append(cases, runtimeCases()...)
	runStoreCases(t, newStore, cases, func(t *testing.T, s bus.RecurringStore) {
		assertEmpty(t, s)
		if recs, err := s.ListRecurring(ctxT(t)); err != nil || len(recs) != 0 {
			t.Errorf("recurring records left after the case: %v (err %v)", recs, err)
		}
	})
}

// msec is t truncated to the millisecond.
func msec(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

func recName(t *testing.T) string { t.Helper(); return "rec-" + Namespace() }

func mustDeclare(t *testing.T, s bus.RecurringStore, name, fp string) (bus.RecurringRecord, bool) {
	t.Helper()
	rec, changed, err := s.DeclareRecurring(ctxT(t), bus.RecurringRecord{Name: name, Fingerprint: fp, Schedule: "text " + fp})
	if err != nil {
		t.Fatalf("DeclareRecurring(%s, %s): %v", name, fp, err)
	}
	return rec, changed
}

func mustLoadRec(t *testing.T, s bus.RecurringStore, name string) bus.RecurringRecord {
	t.Helper()
	rec, ok, err := s.LoadRecurring(ctxT(t), name)
	if err != nil || !ok {
		t.Fatalf("LoadRecurring(%s) = found %v, %v; want the record", name, ok, err)
	}
	return rec
}

func mustAdvance(t *testing.T, s bus.RecurringStore, adv bus.RecurringAdvance, want bool) {
	t.Helper()
	ok, err := s.AdvanceRecurring(ctxT(t), adv)
	if err != nil {
		t.Fatalf("AdvanceRecurring(%s from %v): %v", adv.Name, adv.From, err)
	}
	if ok != want {
		t.Fatalf("AdvanceRecurring(%s from %v) = %v, want %v", adv.Name, adv.From, ok, want)
	}
}

func mustDeleteRec(t *testing.T, s bus.RecurringStore, name string, cancel ...string) {
	t.Helper()
	if ok, err := s.DeleteRecurring(ctxT(t), name, cancel); err != nil || !ok {
		t.Fatalf("DeleteRecurring(%s) = %v, %v; want true", name, ok, err)
	}
}

// drain claims and deletes every row of the case.
func drain(t *testing.T, s bus.ScheduledStore) []bus.OutgoingMessage {
	t.Helper()
	got := claim(t, s, 1000, time.Minute)
	if len(got) > 0 {
		mustDelete(t, s, got)
	}
	return got
}

func testRecDeclare(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	if _, ok, err := s.LoadRecurring(ctxT(t), name); err != nil || ok {
		t.Fatalf("LoadRecurring before declaring = %v, %v; want false, nil", ok, err)
	}
	rec, changed := mustDeclare(t, s, name, "fp1")
	if !changed || rec.Name != name || rec.Fingerprint != "fp1" || rec.Schedule != "text fp1" || rec.Generation != 1 ||
		rec.Paused || !rec.Last.IsZero() || len(rec.Ticks) != 0 {
		t.Fatalf("first declaration = %+v, changed %v; want a new record at generation 1", rec, changed)
	}
	again, changed := mustDeclare(t, s, name, "fp1")
	if changed || again.Generation != 1 {
		t.Fatalf("same declaration again = %+v, changed %v; want the record unchanged", again, changed)
	}
	if got := mustLoadRec(t, s, name); got.Generation != 1 || got.Fingerprint != "fp1" {
		t.Fatalf("LoadRecurring = %+v", got)
	}
	mustDeleteRec(t, s, name)
}

func testRecRedeclare(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp1")
	ticks := []time.Time{now.Add(time.Hour), now.Add(2 * time.Hour)}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp1", Last: ticks[1], Ticks: ticks}, true)
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || !ok {
		t.Fatalf("SetRecurringPaused = %v, %v", ok, err)
	}
	rec, changed := mustDeclare(t, s, name, "fp2")
	if !changed || rec.Generation != 2 || rec.Fingerprint != "fp2" || rec.Schedule != "text fp2" {
		t.Fatalf("declaration with another fingerprint = %+v, changed %v; want generation 2 and the new definition", rec, changed)
	}
	if !rec.Paused || !rec.Last.Equal(ticks[1]) || !slices.EqualFunc(rec.Ticks, ticks, time.Time.Equal) {
		t.Fatalf("redeclared record = %+v; want Paused, Last and Ticks kept", rec)
	}
	// The older definition declared again wins again: the latest declaration decides.
	if rec, _ := mustDeclare(t, s, name, "fp1"); rec.Generation != 3 {
		t.Fatalf("generation after a third declaration = %d, want 3", rec.Generation)
	}
	mustDeleteRec(t, s, name)
}

func testRecAdvanceCAS(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	t1 := now.Add(time.Hour)
	r1 := row(name+"-1", t1)
	// The wrong generation or the wrong Last changes nothing.
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 2, Last: t1, Ticks: []time.Time{t1}, Store: []bus.OutgoingMessage{r1}}, false)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: now, Last: t1, Ticks: []time.Time{t1}, Store: []bus.OutgoingMessage{r1}}, false)
	mustAdvance(t, s, bus.RecurringAdvance{Name: "missing-" + name, Generation: 1, Fingerprint: "fp", Last: t1}, false)
	if _, ok, _ := s.NextDueOutgoing(ctxT(t), suiteTransport); ok {
		t.Fatal("a refused advance stored its row")
	}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1}, Store: []bus.OutgoingMessage{r1}}, true)
	rec := mustLoadRec(t, s, name)
	if !rec.Last.Equal(t1) || len(rec.Ticks) != 1 || !rec.Ticks[0].Equal(t1) {
		t.Fatalf("record after the advance = %+v; want Last and Ticks %v", rec, t1)
	}
	// The same step again is refused: Last moved on.
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1}}, false)
	mustDeleteRec(t, s, name, r1.ID)
}

func testRecAdvanceRows(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	past, future := row(name+"-past", now.Add(-time.Second)), row(name+"-future", now.Add(time.Hour))
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: future.DueAt,
		Ticks: []time.Time{past.DueAt, future.DueAt}, Store: []bus.OutgoingMessage{past, future}}, true)
	// Storing an ID again keeps the one row; cancelling removes it.
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: future.DueAt, Last: future.DueAt,
		Ticks: []time.Time{past.DueAt}, Store: []bus.OutgoingMessage{past}, Cancel: []string{future.ID}}, true)
	got := drain(t, s)
	if len(got) != 1 || got[0].ID != past.ID {
		t.Fatalf("rows after the advances = %v, want only %s", ids(got), past.ID)
	}
	mustDeleteRec(t, s, name)
}

func testRecAdvanceLeased(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	r := row(name+"-due", now.Add(-time.Second))
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: r.DueAt, Ticks: []time.Time{r.DueAt}, Store: []bus.OutgoingMessage{r}}, true)
	held := claim(t, s, 10, time.Minute)
	if len(held) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(held))
	}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: r.DueAt, Last: r.DueAt, Cancel: []string{r.ID}}, true)
	mustDelete(t, s, held) // still there, still held: it is being delivered
	mustDeleteRec(t, s, name)
}

func testRecAdvanceRace(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	const n = 8
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tick := now.Add(time.Duration(i+1) * time.Minute)
			ok, err := s.AdvanceRecurring(ctxT(t), bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: tick,
				Ticks: []time.Time{tick}, Store: []bus.OutgoingMessage{row(name+"-"+tick.Format("150405"), now.Add(-time.Second))}})
			if err != nil {
				t.Errorf("AdvanceRecurring: %v", err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of %d racing advances from one Last succeeded, want 1", won.Load(), n)
	}
	rec := mustLoadRec(t, s, name)
	got := drain(t, s)
	if len(got) != 1 || len(rec.Ticks) != 1 || got[0].ID != name+"-"+rec.Ticks[0].Format("150405") {
		t.Fatalf("after the race: rows %v, record %+v; want the winner's row alone", ids(got), rec)
	}
	mustDeleteRec(t, s, name)
}

func testRecPause(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || ok {
		t.Fatalf("SetRecurringPaused of a missing record = %v, %v; want false, nil", ok, err)
	}
	mustDeclare(t, s, name, "fp")
	last := now.Add(-time.Hour)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: last}, true)
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || !ok {
		t.Fatalf("pause = %v, %v", ok, err)
	}
	if rec := mustLoadRec(t, s, name); !rec.Paused || !rec.Last.Equal(last) {
		t.Fatalf("paused record = %+v; want Paused and Last unchanged", rec)
	}
	if ok, err := s.SetRecurringPaused(ctxT(t), name, false, now); err != nil || !ok {
		t.Fatalf("resume = %v, %v", ok, err)
	}
	if rec := mustLoadRec(t, s, name); rec.Paused || !rec.Last.Equal(now) {
		t.Fatalf("resumed record = %+v; want Last moved to the resume time %v", rec, now)
	}
	// Resuming never moves Last back.
	if _, err := s.SetRecurringPaused(ctxT(t), name, false, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if rec := mustLoadRec(t, s, name); !rec.Last.Equal(now) {
		t.Fatalf("Last after resuming at an earlier time = %v, want %v", rec.Last, now)
	}
	mustDeleteRec(t, s, name)
}

func testRecDelete(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	r := row(name+"-1", now.Add(time.Hour))
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: r.DueAt, Ticks: []time.Time{r.DueAt}, Store: []bus.OutgoingMessage{r}}, true)
	mustDeleteRec(t, s, name, r.ID)
	if _, ok, err := s.LoadRecurring(ctxT(t), name); err != nil || ok {
		t.Fatalf("LoadRecurring after delete = %v, %v; want false", ok, err)
	}
	if ok, err := s.DeleteRecurring(ctxT(t), name, nil); err != nil || ok {
		t.Fatalf("second DeleteRecurring = %v, %v; want false, nil", ok, err)
	}
}

func testRecList(t *testing.T, s bus.RecurringStore) {
	prefix := recName(t)
	names := []string{prefix + "-c", prefix + "-a", prefix + "-b"}
	for _, n := range names {
		mustDeclare(t, s, n, "fp-"+n)
	}
	recs, err := s.ListRecurring(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Name)
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Fatalf("ListRecurring = %v, want %v", got, want)
	}
	for _, n := range names {
		mustDeleteRec(t, s, n)
	}
}

func testRecAlive(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	if rec := mustLoadRec(t, s, name); !rec.Alive.IsZero() {
		t.Fatalf("liveness mark of a new record = %v, want zero", rec.Alive)
	}
	t1, t2 := now.Add(time.Minute), now.Add(2*time.Minute)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1}, Alive: t2}, true)
	if rec := mustLoadRec(t, s, name); !rec.Alive.Equal(t2) {
		t.Fatalf("liveness mark after an advance = %v, want %v", rec.Alive, t2)
	}
	// An earlier mark, or none, leaves the later one.
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: t1, Last: t1, Ticks: []time.Time{t1}, Alive: now}, true)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: t1, Last: t2, Ticks: []time.Time{t1}}, true)
	rec := mustLoadRec(t, s, name)
	if !rec.Alive.Equal(t2) || !rec.Last.Equal(t2) {
		t.Fatalf("record after earlier marks = %+v; want Alive %v kept and Last %v", rec, t2, t2)
	}
	// A declaration, a pause and a list keep it.
	mustDeclare(t, s, name, "fp2")
	if _, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil {
		t.Fatal(err)
	}
	recs, err := s.ListRecurring(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(recs, func(r bus.RecurringRecord) bool { return r.Name == name })
	if i < 0 || !recs[i].Alive.Equal(t2) {
		t.Fatalf("listed records %+v; want %s with Alive %v", recs, name, t2)
	}
	mustDeleteRec(t, s, name)
}

// A pause that lands between a step's read and its write makes the write
// fail, and so does a resume that lands during a paused step.
func testRecPauseRacesStep(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	t1 := now.Add(time.Minute)
	step := bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1},
		Store: []bus.OutgoingMessage{row(name+"-1", t1)}}
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || !ok {
		t.Fatalf("pause = %v, %v", ok, err)
	}
	mustAdvance(t, s, step, false)
	if _, ok, _ := s.NextDueOutgoing(ctxT(t), suiteTransport); ok {
		t.Fatal("a step planned before the pause stored its row after it")
	}
	paused := step
	paused.Paused, paused.Store, paused.Last, paused.Ticks = true, nil, now, nil
	if ok, err := s.SetRecurringPaused(ctxT(t), name, false, now); err != nil || !ok {
		t.Fatalf("resume = %v, %v", ok, err)
	}
	paused.From = now
	mustAdvance(t, s, paused, false)
	step.From = now // resuming moved Last to the resume time
	mustAdvance(t, s, step, true)
	mustDeleteRec(t, s, name, name+"-1")
}

// A step of a definition the record no longer has fails, whatever the
// generation says.
func testRecFingerprintCAS(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp1")
	t1 := now.Add(time.Minute)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp2", Last: t1, Ticks: []time.Time{t1},
		Store: []bus.OutgoingMessage{row(name+"-1", t1)}}, false)
	if _, ok, _ := s.NextDueOutgoing(ctxT(t), suiteTransport); ok {
		t.Fatal("a step of another definition stored its row")
	}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp1", Last: t1, Ticks: []time.Time{t1}}, true)
	mustDeleteRec(t, s, name)
}

// A deleted record keeps its generation: the name declared again gets a
// later one, so a process still stepping the deleted generation (a
// rolling deploy) can never write again.
func testRecDeleteKeepsGeneration(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclare(t, s, name, "fp")
	t1 := now.Add(time.Minute)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1}}, true)
	mustDeleteRec(t, s, name)
	old := bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1},
		Store: []bus.OutgoingMessage{row(name+"-old", t1)}}
	mustAdvance(t, s, old, false)
	old.From = t1
	mustAdvance(t, s, old, false)
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || ok {
		t.Fatalf("pause of a deleted record = %v, %v; want false, nil", ok, err)
	}
	rec, changed := mustDeclare(t, s, name, "fp")
	if !changed || rec.Generation <= 1 || rec.Paused || !rec.Last.IsZero() || len(rec.Ticks) != 0 || !rec.Alive.IsZero() {
		t.Fatalf("declared again after a delete = %+v, changed %v; want a fresh record at a generation after 1", rec, changed)
	}
	old.From = time.Time{}
	mustAdvance(t, s, old, false)
	if _, ok, _ := s.NextDueOutgoing(ctxT(t), suiteTransport); ok {
		t.Fatal("a step of the deleted generation stored its row")
	}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: rec.Generation, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1}}, true)
	mustDeleteRec(t, s, name)
}

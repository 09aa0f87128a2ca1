package bustest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// The contract of bus.RecurringRuntimeStore, run by RecurringTests on the
// stores that implement it: the runtime fields of a record, the claim of
// the records that fall due, and paging.

// runtimeCases are the cases of a RecurringRuntimeStore.
func runtimeCases() []storeCase[bus.RecurringStore] {
	only := func(fn func(*testing.T, bus.RecurringRuntimeStore)) func(*testing.T, bus.RecurringStore) {
		return func(t *testing.T, s bus.RecurringStore) {
			rs, ok := s.(bus.RecurringRuntimeStore)
			if !ok {
				t.Skipf("%T does not implement bus.RecurringRuntimeStore", s)
			}
			fn(t, rs)
		}
	}
	return []storeCase[bus.RecurringStore]{
		{"RuntimeDeclareKeepsSpecAndDue", only(testRecRuntimeDeclare)},
		{"RuntimeAdvanceSetsDueRunsAndSkipped", only(testRecRuntimeAdvance)},
		{"RuntimeClaimTakesDueRecordsOnce", only(testRecRuntimeClaim)},
		{"RuntimeRacingClaimsSplitTheRecords", only(testRecRuntimeClaimRace)},
		{"RuntimePauseAndDeleteSetDue", only(testRecRuntimePause)},
		{"RuntimeListPagesByPrefix", only(testRecRuntimePage)},
		{"RunGuardTellsARunningOccurrence", testRecRunGuard},
		{"RacingDeclarationsLeaveOneDefinition", testRecDeclareRace},
		{"BusesSettingOneNameAtOnceLeaveOneDefinition", only(testRecSetRace)},
		{"TwoTriggersAreTwoOccurrences", only(testRecTriggerTwice)},
	}
}

// testRecDeclareRace: declarations of one name with other definitions at
// once leave one of them, at a generation that counts the changes, and
// only that definition can step.
func testRecDeclareRace(t *testing.T, s bus.RecurringStore) {
	name := recName(t)
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, _, err := s.DeclareRecurring(ctxT(t), bus.RecurringRecord{Name: name, Fingerprint: fmt.Sprintf("fp%d", i), Schedule: "x"}); err != nil {
				t.Errorf("DeclareRecurring: %v", err)
			}
		})
	}
	wg.Wait()
	rec := mustLoadRec(t, s, name)
	if rec.Generation < 1 || rec.Generation > n || !slices.Contains([]string{"fp0", "fp1", "fp2", "fp3", "fp4", "fp5"}, rec.Fingerprint) {
		t.Fatalf("record after racing declarations = %+v; want one of them at a generation in 1..%d", rec, n)
	}
	t1 := msec(time.Now()).Add(time.Minute)
	for i := range n {
		fp := fmt.Sprintf("fp%d", i)
		mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: rec.Generation, Fingerprint: fp, Last: t1}, fp == rec.Fingerprint)
	}
	mustDeleteRec(t, s, name)
}

// busOn starts a send-only bus on the store, which must be a persistence.
func busOn(t *testing.T, s bus.RecurringStore) *bus.Bus {
	t.Helper()
	p, ok := s.(bus.Persistence)
	if !ok {
		t.Fatalf("%T is not a bus.Persistence", s)
	}
	return StartBus(t, bus.Config{Endpoint: "rec-" + Namespace(), Persistence: p, SendOnly: true,
		Transport: suiteIdentity{bus.NewMemoryTransport()}}, nil)
}

// suiteIdentity is a transport whose rows the cases claim (suiteTransport).
type suiteIdentity struct{ bus.Transport }

// Identity returns the suite's transport identity.
func (suiteIdentity) Identity() string { return suiteTransport }

// runtimeRow is the message of the bus-level runtime cases.
type runtimeRow struct{ N int }

// testRecSetRace: two buses set one name with two definitions at once;
// the schedule ends with one of them.
func testRecSetRace(t *testing.T, s bus.RecurringRuntimeStore) {
	name := recName(t)
	a, b := busOn(t, s), busOn(t, s)
	var wg sync.WaitGroup
	for i, x := range []*bus.Bus{a, b} {
		wg.Go(func() {
			err := x.SetRecurring(ctxT(t), bus.RecurringSpec{Name: name, Schedule: fmt.Sprintf("@every %dm", i+1),
				Message: runtimeRow{N: i}, Options: []bus.Option{bus.To("nowhere")}})
			if err != nil {
				t.Errorf("SetRecurring: %v", err)
			}
		})
	}
	wg.Wait()
	infos, err := a.ListRecurrings(ctxT(t), bus.RecurringFilter{Prefix: name})
	if err != nil || len(infos) != 1 || !infos[0].Runtime || (infos[0].Schedule != "@every 1m" && infos[0].Schedule != "@every 2m") {
		t.Fatalf("ListRecurrings after racing sets = %+v, %v; want one of the two definitions", infos, err)
	}
	rec := mustLoadRec(t, s, name)
	if err := a.DeleteRecurring(ctxT(t), name); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	if rec.Generation < 1 || rec.Generation > 2 {
		t.Fatalf("generation after two racing sets = %d, want 1 or 2", rec.Generation)
	}
}

// testRecTriggerTwice: two triggers of a schedule at once store two
// occurrences; a keyed one retried stores one.
func testRecTriggerTwice(t *testing.T, s bus.RecurringRuntimeStore) {
	name := recName(t)
	b := busOn(t, s)
	if err := b.SetRecurring(ctxT(t), bus.RecurringSpec{Name: name, Schedule: "@every 24h", Message: runtimeRow{},
		Options: []bus.Option{bus.To("nowhere")}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := b.TriggerRecurring(ctxT(t), name); err != nil {
				t.Errorf("TriggerRecurring: %v", err)
			}
		})
	}
	wg.Wait()
	for range 2 {
		if err := b.TriggerRecurring(ctxT(t), name, bus.TriggerKey("k")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteRecurring(ctxT(t), name); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s); len(got) != 3 {
		t.Fatalf("rows after two triggers and a keyed one retried = %v, want 3", ids(got))
	}
}

// testRecRunGuard: bus.RecurringRunGuard, for OverlapSkip.
func testRecRunGuard(t *testing.T, s bus.RecurringStore) {
	g, ok := s.(bus.RecurringRunGuard)
	if !ok {
		t.Skipf("%T does not implement bus.RecurringRunGuard", s)
	}
	name := recName(t)
	now := msec(time.Now())
	begin := func(id string, at time.Time, want bool) {
		t.Helper()
		got, err := g.BeginRecurringRun(ctxT(t), name, id, at, at.Add(time.Minute))
		if err != nil || got != want {
			t.Fatalf("BeginRecurringRun(%s at %v) = %v, %v; want %v", id, at, got, err, want)
		}
	}
	begin("occ-1", now, true)
	begin("occ-2", now.Add(time.Second), false) // occ-1 runs
	begin("occ-1", now.Add(time.Second), true)  // its redelivery
	if err := g.EndRecurringRun(ctxT(t), name, "occ-2"); err != nil {
		t.Fatal(err)
	}
	begin("occ-2", now.Add(2*time.Second), false) // ending another run left occ-1's
	if err := g.EndRecurringRun(ctxT(t), name, "occ-1"); err != nil {
		t.Fatal(err)
	}
	begin("occ-2", now.Add(3*time.Second), true)
	begin("occ-3", now.Add(2*time.Minute), true) // occ-2's run timed out
	var wg sync.WaitGroup
	var won sync.Map
	for i := range 6 {
		wg.Go(func() {
			id := fmt.Sprintf("race-%d", i)
			if ok, err := g.BeginRecurringRun(ctxT(t), name, id, now.Add(time.Hour), now.Add(2*time.Hour)); err != nil {
				t.Errorf("BeginRecurringRun: %v", err)
			} else if ok {
				won.Store(id, true)
			}
		})
	}
	wg.Wait()
	n := 0
	won.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d of 6 racing runs began after occ-3's timed out, want 1", n)
	}
	won.Range(func(k, _ any) bool {
		if err := g.EndRecurringRun(ctxT(t), name, k.(string)); err != nil {
			t.Fatal(err)
		}
		return true
	})
}

func mustDeclareSpec(t *testing.T, s bus.RecurringStore, name, fp string, spec []byte, due time.Time) (bus.RecurringRecord, bool) {
	t.Helper()
	rec, changed, err := s.DeclareRecurring(ctxT(t), bus.RecurringRecord{Name: name, Fingerprint: fp, Schedule: "@every 1m",
		Spec: spec, Due: due})
	if err != nil {
		t.Fatalf("DeclareRecurring(%s, %s): %v", name, fp, err)
	}
	return rec, changed
}

func mustClaimRec(t *testing.T, s bus.RecurringRuntimeStore, now time.Time, limit int, lease time.Duration) []string {
	t.Helper()
	recs, err := s.ClaimDueRecurring(ctxT(t), now, limit, lease)
	if err != nil {
		t.Fatalf("ClaimDueRecurring: %v", err)
	}
	names := make([]string, len(recs))
	for i, r := range recs {
		names[i] = r.Name
		if r.Spec == nil {
			t.Errorf("claimed record %s has no Spec", r.Name)
		}
	}
	return names
}

func testRecRuntimeDeclare(t *testing.T, s bus.RecurringRuntimeStore) {
	name := recName(t)
	now := msec(time.Now())
	spec := []byte(`{"v":1,"schedule":"@every 1m"}`)
	rec, changed := mustDeclareSpec(t, s, name, "fp1", spec, now)
	if !changed || !bytes.Equal(rec.Spec, spec) || !rec.Due.Equal(now) || rec.Runs != 0 || rec.Skipped != 0 {
		t.Fatalf("declared runtime record = %+v, changed %v; want its Spec and Due", rec, changed)
	}
	t1 := now.Add(time.Minute)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp1", Last: t1, Ticks: []time.Time{t1},
		Due: t1, Runs: 3, Skipped: 2}, true)
	spec2 := []byte(`{"v":1,"schedule":"@every 2m"}`)
	rec, changed = mustDeclareSpec(t, s, name, "fp2", spec2, now.Add(time.Second))
	if !changed || rec.Generation != 2 || !bytes.Equal(rec.Spec, spec2) || !rec.Due.Equal(now.Add(time.Second)) ||
		rec.Runs != 3 || rec.Skipped != 2 || !rec.Last.Equal(t1) {
		t.Fatalf("redeclared runtime record = %+v; want the new Spec and Due, Runs, Skipped and Last kept", rec)
	}
	// A declaration in code (no Spec) replaces a runtime one.
	if rec, _ := mustDeclare(t, s, name, "fp3"); rec.Spec != nil {
		t.Fatalf("record declared in code = %+v; want no Spec", rec)
	}
	mustDeleteRec(t, s, name)
}

func testRecRuntimeAdvance(t *testing.T, s bus.RecurringRuntimeStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclareSpec(t, s, name, "fp", []byte(`{}`), now)
	t1 := now.Add(time.Minute)
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", Last: t1, Ticks: []time.Time{t1},
		Due: t1, Runs: 7, Skipped: 1}, true)
	rec := mustLoadRec(t, s, name)
	if !rec.Due.Equal(t1) || rec.Runs != 7 || rec.Skipped != 1 {
		t.Fatalf("record after an advance = %+v; want Due %v, Runs 7, Skipped 1", rec, t1)
	}
	mustAdvance(t, s, bus.RecurringAdvance{Name: name, Generation: 1, Fingerprint: "fp", From: t1, Last: t1, Ticks: []time.Time{t1}}, true)
	if rec := mustLoadRec(t, s, name); !rec.Due.IsZero() || rec.Runs != 0 {
		t.Fatalf("record after an advance with no Due = %+v; want Due zero (never) and Runs 0", rec)
	}
	mustDeleteRec(t, s, name)
}

func testRecRuntimeClaim(t *testing.T, s bus.RecurringRuntimeStore) {
	p := recName(t)
	now := msec(time.Now())
	mustDeclareSpec(t, s, p+"-b", "fp", []byte(`{}`), now.Add(-2*time.Second))
	mustDeclareSpec(t, s, p+"-a", "fp", []byte(`{}`), now.Add(-time.Second))
	mustDeclareSpec(t, s, p+"-c", "fp", []byte(`{}`), now)
	mustDeclareSpec(t, s, p+"-later", "fp", []byte(`{}`), now.Add(time.Hour))
	mustDeclareSpec(t, s, p+"-never", "fp", []byte(`{}`), time.Time{})
	mustDeclareSpec(t, s, p+"-gone", "fp", []byte(`{}`), now.Add(-time.Hour))
	mustDeleteRec(t, s, p+"-gone")
	// A record declared in code is never claimed, whatever its Due.
	mustDeclare(t, s, p+"-code", "fp")
	got := mustClaimRec(t, s, now, 10, time.Minute)
	if want := []string{p + "-b", p + "-a", p + "-c"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want the due runtime records, earliest Due first: %v", got, want)
	}
	if got := mustClaimRec(t, s, now, 10, time.Minute); len(got) != 0 {
		t.Fatalf("a second claim took %v, want none: the first holds them", got)
	}
	if rec := mustLoadRec(t, s, p+"-a"); !rec.Due.Equal(now.Add(time.Minute)) {
		t.Fatalf("claimed record's Due = %v, want now plus the lease %v", rec.Due, now.Add(time.Minute))
	}
	// The lease lapsed: they are due again.
	if got := mustClaimRec(t, s, now.Add(time.Minute+time.Millisecond), 2, time.Minute); len(got) != 2 {
		t.Fatalf("after the lease, a claim of 2 took %v", got)
	}
	for _, n := range []string{"-a", "-b", "-c", "-later", "-never", "-code"} {
		mustDeleteRec(t, s, p+n)
	}
}

func testRecRuntimeClaimRace(t *testing.T, s bus.RecurringRuntimeStore) {
	p := recName(t)
	now := msec(time.Now())
	const n = 12
	for i := range n {
		mustDeclareSpec(t, s, fmt.Sprintf("%s-%02d", p, i), "fp", []byte(`{}`), now.Add(-time.Duration(i)*time.Millisecond))
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n {
				recs, err := s.ClaimDueRecurring(ctxT(t), now, 2, time.Minute)
				if err != nil {
					t.Errorf("ClaimDueRecurring: %v", err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					got = append(got, r.Name)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if len(got) != n || len(slices.Compact(slices.Clone(got))) != n {
		t.Fatalf("racing claims took %v (%d), want each of the %d due records once", got, len(got), n)
	}
	for i := range n {
		mustDeleteRec(t, s, fmt.Sprintf("%s-%02d", p, i))
	}
}

func testRecRuntimePause(t *testing.T, s bus.RecurringRuntimeStore) {
	name := recName(t)
	now := msec(time.Now())
	mustDeclareSpec(t, s, name, "fp", []byte(`{}`), time.Time{})
	if ok, err := s.SetRecurringPaused(ctxT(t), name, true, now); err != nil || !ok {
		t.Fatalf("pause = %v, %v", ok, err)
	}
	if rec := mustLoadRec(t, s, name); !rec.Due.Equal(now) {
		t.Fatalf("paused record's Due = %v, want the pause's time %v: it is stepped at once", rec.Due, now)
	}
	if ok, err := s.SetRecurringPaused(ctxT(t), name, false, now.Add(time.Second)); err != nil || !ok {
		t.Fatalf("resume = %v, %v", ok, err)
	}
	if rec := mustLoadRec(t, s, name); !rec.Due.Equal(now.Add(time.Second)) {
		t.Fatalf("resumed record's Due = %v, want the resume's time", rec.Due)
	}
	mustDeleteRec(t, s, name)
	if got := mustClaimRec(t, s, now.Add(time.Hour), 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %v after the delete", got)
	}
	rec, _ := mustDeclare(t, s, name, "fp")
	if rec.Spec != nil || !rec.Due.IsZero() || rec.Runs != 0 {
		t.Fatalf("declared after the delete = %+v; want no Spec, Due or Runs left", rec)
	}
	mustDeleteRec(t, s, name)
}

func testRecRuntimePage(t *testing.T, s bus.RecurringRuntimeStore) {
	p := recName(t)
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("%s-t-%d", p, i)
		want = append(want, name)
		mustDeclare(t, s, name, "fp")
	}
	mustDeclare(t, s, p+"-u", "fp")
	mustDeclare(t, s, p+"-t-gone", "fp")
	mustDeleteRec(t, s, p+"-t-gone")
	var got []string
	for after := ""; ; {
		page, err := s.ListRecurringPage(ctxT(t), p+"-t-", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, r.Name)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages = %v, want %v", got, want)
	}
	for _, n := range want {
		mustDeleteRec(t, s, n)
	}
	mustDeleteRec(t, s, p+"-u")
}

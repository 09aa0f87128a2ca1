package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mysql"
)

// oldRecurringTable is the recurring table as versions before runtime
// schedules made it.
const oldRecurringTable = "CREATE TABLE `%s_recurring` (" + `
	name        VARBINARY(255)  NOT NULL,
	fingerprint VARBINARY(1024) NOT NULL,
	schedule    TEXT            NOT NULL,
	generation  BIGINT          NOT NULL,
	paused      BOOLEAN         NOT NULL DEFAULT FALSE,
	last_tick   DATETIME(6)     NULL,
	ticks       LONGBLOB        NOT NULL,
	alive_until DATETIME(6)     NULL,
	revision    BIGINT          NOT NULL DEFAULT 0,
	updated_at  DATETIME(6)     NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// oldTable makes the recurring table of table as an earlier version did,
// with one paused record "old" (generation 3, a last tick, two ticks and
// a liveness mark), dropped at cleanup.
func oldTable(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	t.Cleanup(func() { dropTables(db, table) })
	if _, err := db.ExecContext(t.Context(), fmt.Sprintf(oldRecurringTable, table)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), "INSERT INTO `"+table+"_recurring`"+
		" (name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until, updated_at) VALUES"+
		" ('old', 'fp', '@every 1m', 3, TRUE, '2026-01-02 03:04:00', '[1767323040000000,1767323100000000]',"+
		" '2026-01-02 03:05:00.5', UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
}

// A recurring table made before runtime schedules gets their columns from
// Setup, even from several at once; its record loads as it was (no spec,
// no due time, no counts) and works: it advances, pauses, becomes a
// runtime schedule that a claim takes, and the table ends as a new one.
func TestSetupAddsRuntimeColumnsToAnOldRecurringTable(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	table := freshTable()
	oldTable(t, db, table)
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 { // racing Setups: one adds the columns, the others find them
		wg.Go(func() {
			if err := p.Setup(t.Context()); err != nil {
				t.Errorf("Setup on an old table: %v", err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	last := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	rec, ok, err := p.LoadRecurring(t.Context(), "old")
	if err != nil || !ok {
		t.Fatalf("LoadRecurring(old) = %v, %v", ok, err)
	}
	want := bus.RecurringRecord{Name: "old", Fingerprint: "fp", Schedule: "@every 1m", Generation: 3, Paused: true,
		Last: last, Ticks: []time.Time{last, last.Add(time.Minute)}, Alive: last.Add(time.Minute + 500*time.Millisecond)}
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("migrated record = %+v\nwant %+v", rec, want)
	}
	due := time.Now().UTC().Truncate(time.Millisecond)
	if ok, err := p.AdvanceRecurring(t.Context(), bus.RecurringAdvance{Name: "old", Generation: 3, Fingerprint: "fp",
		Paused: true, From: last, Last: last.Add(time.Minute), Due: due, Runs: 2, Skipped: 1}); err != nil || !ok {
		t.Fatalf("AdvanceRecurring on the migrated record = %v, %v", ok, err)
	}
	rec, _, _ = p.LoadRecurring(t.Context(), "old")
	if !rec.Due.Equal(due) || rec.Runs != 2 || rec.Skipped != 1 || rec.Spec != nil {
		t.Fatalf("advanced migrated record = %+v; want Due %v, Runs 2, Skipped 1", rec, due)
	}
	if got, err := p.ClaimDueRecurring(t.Context(), due, 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("ClaimDueRecurring = %v, %v; a record declared in code is never claimed", got, err)
	}
	spec := []byte(`{"schedule":"@every 1m"}`)
	if rec, changed, err := p.DeclareRecurring(t.Context(), bus.RecurringRecord{Name: "old", Fingerprint: "fp2",
		Schedule: "@every 1m", Spec: spec, Due: due}); err != nil || !changed || rec.Generation != 4 || rec.Runs != 2 {
		t.Fatalf("DeclareRecurring(runtime) = %+v, %v, %v", rec, changed, err)
	}
	got, err := p.ClaimDueRecurring(t.Context(), due, 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].Name != "old" || !bytes.Equal(got[0].Spec, spec) {
		t.Fatalf("ClaimDueRecurring = %+v, %v; want the migrated record, now a runtime one", got, err)
	}
	if ok, err := p.DeleteRecurring(t.Context(), "old", nil); err != nil || !ok {
		t.Fatalf("DeleteRecurring = %v, %v", ok, err)
	}
	fresh := newStore(t, db, mysql.Options{})
	if a, b := showCreate(t, db, table+"_recurring"), showCreate(t, db, fresh.Table()[1:len(fresh.Table())-1]+"_recurring"); a != b {
		t.Errorf("migrated table:\n%s\nwant the new one's:\n%s", a, b)
	}
}

// showCreate is the CREATE TABLE of table, its name left out.
func showCreate(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	var name, ddl string
	if err := db.QueryRowContext(t.Context(), "SHOW CREATE TABLE `"+table+"`").Scan(&name, &ddl); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(ddl, table, "", 1)
}

// A page's prefix is a literal: its _ and % match themselves, and names
// with bytes above any letter still fall in (or out of) it by byte order.
func TestListRecurringPageTakesThePrefixLiterally(t *testing.T) {
	t.Parallel()
	p := newStore(t, testDB(t), mysql.Options{})
	names := []string{"a_b", "a_b-1", "a_b\xff", "a_b\xff\xff", "a_c", "axb-1", "a%b", "a_", "\xff\xff-1", "\xff\xfe"}
	for _, n := range names {
		if _, _, err := p.DeclareRecurring(t.Context(), bus.RecurringRecord{Name: n, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{"a_b", "", 10, []string{"a_b", "a_b-1", "a_b\xff", "a_b\xff\xff"}},
		{"a_b", "a_b-1", 2, []string{"a_b\xff", "a_b\xff\xff"}},
		{"a%", "", 10, []string{"a%b"}},
		{"a_b\xff", "", 10, []string{"a_b\xff", "a_b\xff\xff"}},
		{"\xff\xff", "", 10, []string{"\xff\xff-1"}},
		{"", "a_c", 3, []string{"axb-1", "\xff\xfe", "\xff\xff-1"}},
		{"a_", "", 0, nil},
	} {
		page, err := p.ListRecurringPage(t.Context(), c.prefix, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ListRecurringPage(%q, %q, %d) = %q, want %q", c.prefix, c.after, c.limit, got, c.want)
		}
	}
}

// The claim reads the runtime records due through claim_idx: neither the
// records declared in code (paused ones keep a due time in the past) nor
// the runtime records not yet due are in the range it scans.
func TestClaimDueRecurringScansOnlyTheRecordsDue(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	p := newStore(t, db, mysql.Options{})
	now := time.Now().UTC()
	for i := range 300 {
		name := fmt.Sprintf("code-%03d", i)
		if _, _, err := p.DeclareRecurring(t.Context(), bus.RecurringRecord{Name: name, Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SetRecurringPaused(t.Context(), name, true, now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		due := now.Add(time.Hour)
		if i < 3 {
			due = now.Add(-time.Minute)
		}
		if _, _, err := p.DeclareRecurring(t.Context(), bus.RecurringRecord{Name: fmt.Sprintf("rt-%03d", i),
			Fingerprint: "fp", Spec: []byte(`{}`), Due: due}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(t.Context(), "ANALYZE TABLE "+p.Table()[:len(p.Table())-1]+"_recurring`"); err != nil {
		t.Fatal(err)
	}
	query, args := mysql.ClaimRecurringQuery(p, now, 500)
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	plan := explain(t, rows)
	if plan["key"] != "claim_idx" || plan["rows"] == "" || len(plan["rows"]) > 1 {
		t.Errorf("the claim's plan = %v; want a range of claim_idx of a few rows", plan)
	}
	got, err := p.ClaimDueRecurring(t.Context(), now, 500, time.Minute)
	if err != nil || len(got) != 3 || got[0].Name != "rt-000" {
		t.Fatalf("ClaimDueRecurring = %d records, %v; want the 3 due", len(got), err)
	}
}

// explain returns the first row of an EXPLAIN by column.
func explain(t *testing.T, rows *sql.Rows) map[string]string {
	t.Helper()
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		t.Fatalf("EXPLAIN: %v", err)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out
}

// runtimeTick is the message of the runtime schedule of the whole-bus test.
type runtimeTick struct{ Tenant string }

// tickArrivals records the tick of each occurrence and when it arrived.
type tickArrivals struct {
	mu    sync.Mutex
	ticks []time.Time
	at    []time.Time
}

func (a *tickArrivals) handle(ctx context.Context, _ runtimeTick) error {
	at := time.Now()
	tick, err := time.Parse(time.RFC3339Nano, bus.IncomingMessage(ctx).Header(bus.HeaderRecurringTick))
	if err != nil {
		return bus.Unrecoverable(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ticks, a.at = append(a.ticks, tick), append(a.at, at)
	return nil
}

func (a *tickArrivals) snapshot() ([]time.Time, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ticks), slices.Clone(a.at)
}

// A schedule set at runtime by a send-only bus runs on the two started
// buses of its endpoint, which share the store: over about 5 s, each tick
// arrives exactly once, none before its time.
func TestRuntimeRecurringEachTickOnceOnTwoDispatchers(t *testing.T) {
	t.Parallel()
	store := newStore(t, testDB(t), mysql.Options{})
	tr := bus.NewMemoryTransport()
	var got tickArrivals
	for range 2 {
		bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Persistence: store,
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}}, func(b *bus.Bus) {
			if err := bus.Handle(b, got.handle); err != nil {
				t.Fatal(err)
			}
		})
	}
	ops := bustest.StartBus(t, bus.Config{Endpoint: "ops", Transport: tr, Persistence: store, SendOnly: true}, nil)
	name := "tenant-" + bustest.Namespace()
	before := time.Now()
	if err := ops.SetRecurring(t.Context(), bus.RecurringSpec{Name: name, Schedule: "@every 1s",
		Message: runtimeTick{Tenant: "acme"}, Options: []bus.Option{bus.To("worker")}}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// The first tick is the first whole second after the schedule was set.
	first, latest := before.Truncate(time.Second).Add(time.Second), after.Truncate(time.Second).Add(time.Second)
	last := latest.Add(4 * time.Second)
	deadline := time.Now().Add(30 * time.Second) // generous: the machine is shared
	for {
		ticks, _ := got.snapshot()
		if len(ticks) > 0 && !ticks[len(ticks)-1].Before(last) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticks by %v: %v; want each second through %v", time.Now(), ticks, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // a duplicate would show up now
	if err := ops.DeleteRecurring(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	ticks, at := got.snapshot()
	order := make([]int, len(ticks)) // by tick: two dispatchers may hand two over out of order
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return ticks[i].Compare(ticks[j]) })
	sorted := make([]time.Time, len(ticks))
	arrived := make([]time.Time, len(ticks))
	for i, k := range order {
		sorted[i], arrived[i] = ticks[k], at[k]
	}
	ticks, at = sorted, arrived
	if len(ticks) == 0 || ticks[0].Before(first) || ticks[0].After(latest) {
		t.Fatalf("ticks %v; want the first in [%v, %v]", ticks, first, latest)
	}
	for i, tick := range ticks {
		if want := ticks[0].Add(time.Duration(i) * time.Second); !tick.Equal(want) {
			t.Fatalf("ticks %v; want each second from %v once", ticks, ticks[0])
		}
		if at[i].Before(tick) {
			t.Errorf("tick %v arrived early, at %v", tick, at[i])
		}
	}
	if n := len(ticks); n < 5 {
		t.Errorf("%d ticks, want at least 5", n)
	}
	late := make([]time.Duration, len(ticks))
	for i := range ticks {
		late[i] = at[i].Sub(ticks[i])
	}
	slices.Sort(late)
	t.Logf("%d ticks; lateness median %v, worst %v", len(late), late[len(late)/2], late[len(late)-1])
}

// BenchmarkClaimDueRecurring claims the 10 runtime records due among n
// that are not, and n/10 declared in code and paused (whose due time
// passed): one claim per iteration, whose cost should not grow with n.
func BenchmarkClaimDueRecurring(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("stored=%d", n+n/10), func(b *testing.B) { benchmarkClaimDueRecurring(b, n) })
	}
}

func benchmarkClaimDueRecurring(b *testing.B, n int) {
	db := testDB(b)
	p := newStore(b, db, mysql.Options{})
	recurring := p.Table()[:len(p.Table())-1] + "_recurring`"
	for i := 0; i < n+n/10; i += 100 { // as DeclareRecurring and SetRecurringPaused leave them
		var rows []string
		for k := i; k < min(i+100, n+n/10); k++ {
			if k < n {
				rows = append(rows, fmt.Sprintf("('rt-%05d', 'fp', '', 1, '[]', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, FALSE, UTC_TIMESTAMP(6))", k))
			} else {
				rows = append(rows, fmt.Sprintf("('code-%05d', 'fp', '', 1, '[]', NULL, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, TRUE, UTC_TIMESTAMP(6))", k))
			}
		}
		if _, err := db.ExecContext(b.Context(), "INSERT INTO "+recurring+
			" (name, fingerprint, schedule, generation, ticks, spec, due_at, paused, updated_at) VALUES "+strings.Join(rows, ", ")); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.ExecContext(b.Context(), "ANALYZE TABLE "+recurring); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		names := make([]any, 10)
		for k := range names {
			names[k] = fmt.Sprintf("rt-%05d", (i*10+k)%n)
		}
		if _, err := db.ExecContext(b.Context(), "UPDATE "+recurring+" SET due_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE"+
			" WHERE name IN (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", names...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		got, err := p.ClaimDueRecurring(b.Context(), time.Now(), 500, time.Hour)
		if err != nil || len(got) != 10 {
			b.Fatalf("ClaimDueRecurring = %d records, %v; want 10", len(got), err)
		}
	}
}

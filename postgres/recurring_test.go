package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// recTick is the message of the recurring tests.
type recTick struct{ At time.Time }

func (recTick) MessageName() string { return "postgres_test.RecTick" }

// Three buses, each with a Persistence of its own on one schema (three
// processes, as far as the database can tell), declare the same schedule:
// every tick is delivered once, none early, with no leader.
func TestRecurringThreeBusesDeliverEachTickOnce(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t, testPool(t))
	tr := bus.NewMemoryTransport()
	var mu sync.Mutex
	seen := map[time.Time]int{}
	var early []string
	for range 3 {
		store, err := postgres.New(newPool(t, 4), postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		bustest.StartBus(t, bus.Config{Endpoint: "worker", Transport: tr, Persistence: store,
			Dispatcher: bus.DispatcherConfig{PollInterval: 200 * time.Millisecond}}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, func(ctx context.Context, m recTick) error {
				mu.Lock()
				defer mu.Unlock()
				seen[m.At]++
				if now := time.Now(); now.Before(m.At) {
					early = append(early, fmt.Sprintf("%v at %v", m.At, now))
				}
				return nil
			}))
			mustDo(t, b.AddRecurring(bus.Recurring{Name: "tick", Schedule: bus.Every(200 * time.Millisecond),
				Message: func(tick time.Time) any { return recTick{At: tick} }, Options: []bus.Option{bus.To("worker")}}))
		})
	}
	start := time.Now()
	time.Sleep(3 * time.Second)
	end := time.Now()
	time.Sleep(time.Second) // the ticks due by end arrive
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("delivered early: %v", early)
	}
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %v delivered %d times", tick, n)
		}
	}
	// Every tick between the first second (the buses started) and end arrived.
	for tick := start.Add(time.Second).Truncate(200 * time.Millisecond); tick.Before(end); tick = tick.Add(200 * time.Millisecond) {
		if seen[tick.UTC()] == 0 {
			t.Errorf("tick %v never delivered (got %d ticks)", tick, len(seen))
		}
	}
}

// The recurring table shown in the guide is the one Setup creates.
func TestRecurringGuideShowsTheTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/guide/recurring.md")
	if err != nil {
		t.Fatal(err)
	}
	m := postgres.Migrations()
	ddl := strings.Join(m[len(m)-4:len(m)-1], ";\n") // the recurring table, its upgrade and its due index
	if !strings.Contains(ddl, "outgoing_messages_recurring") || !strings.Contains(string(doc), ddl+";") {
		t.Errorf("docs/guide/recurring.md does not show the recurring table as Setup creates it:\n%s;", ddl)
	}
}

// TestRecurringMultiProcess runs three OS processes declaring the same
// schedule (every 200 ms) on one table, SIGKILLs one of them, and checks
// that every tick from the start to the end was handled, and none twice
// apart from at most one around the kill (a hand-over the killed process
// made but could not settle is sent again: at least once).
func TestRecurringMultiProcess(t *testing.T) {
	if testing.Short() {
		bustest.SkipOutsideCI(t, "multi-process proof skipped in -short mode")
	}
	t.Parallel()
	pool := testPool(t)
	bin := filepath.Join(t.TempDir(), "recurproc")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./internal/recurproc").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx := ctxTimeout(t, 2*time.Minute)
	p := newStore(t, pool, postgres.Options{})
	schema := strings.Trim(strings.Split(p.Table(), ".")[0], `"`)
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+receipts+` (tick timestamptz NOT NULL, proc text NOT NULL, msg_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*exec.Cmd{}
	for _, name := range []string{"p1", "p2", "p3"} {
		procs[name], _ = startWorker(t, bin, "-schema", schema, "-name", name)
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	if err := procs["p2"].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs["p2"].Wait()
	delete(procs, "p2")
	time.Sleep(3 * time.Second) // past the killed process's leases (1 s + look-ahead)
	end := time.Now()
	time.Sleep(2 * time.Second)
	for name, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT tick, count(*), string_agg(proc, ',') FROM `+receipts+` GROUP BY tick ORDER BY tick`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]int{}
	dups := 0
	for rows.Next() {
		var tick time.Time
		var n int
		var by string
		if err := rows.Scan(&tick, &n, &by); err != nil {
			t.Fatal(err)
		}
		seen[tick.UTC()] = n
		if n > 1 {
			dups++
			t.Logf("tick %v handled %d times, by %s", tick.UTC(), n, by)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if dups > 1 {
		t.Errorf("%d ticks handled more than once, want at most one (the kill)", dups)
	}
	for tick := start.Add(time.Second).Truncate(200 * time.Millisecond); tick.Before(end); tick = tick.Add(200 * time.Millisecond) {
		if seen[tick.UTC()] == 0 {
			t.Errorf("tick %v never handled (%d ticks handled)", tick.UTC(), len(seen))
		}
	}
}

// A recurring table made before the liveness mark and the runtime
// columns existed, in a schema an earlier version set up in full, gets
// its columns and index from Setup, and its records keep working.
func TestRecurringSetupMigratesAnOldTable(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := newStore(t, pool, postgres.Options{}).Table()
	schema = strings.Trim(strings.Split(schema, ".")[0], `"`)
	table := pgx.Identifier{schema, "outgoing_messages_recurring"}.Sanitize()
	ctx := t.Context()
	for _, stmt := range []string{
		`DROP TABLE ` + table,
		`CREATE TABLE ` + table + ` (name text COLLATE "C" PRIMARY KEY, fingerprint text NOT NULL, schedule text NOT NULL,
	generation bigint NOT NULL, paused boolean NOT NULL DEFAULT false, last_tick timestamptz,
	ticks timestamptz[] NOT NULL DEFAULT '{}', updated_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO ` + table + ` (name, fingerprint, schedule, generation, last_tick) VALUES ('old', 'fp', 'every 1h0m0s', 1, '2030-01-01T00:00:00Z')`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	store := newStore(t, pool, postgres.Options{Schema: schema})
	last := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec, ok, err := store.LoadRecurring(ctx, "old")
	if err != nil || !ok || !rec.Last.Equal(last) || !rec.Alive.IsZero() || rec.Spec != nil || !rec.Due.IsZero() || rec.Runs != 0 {
		t.Fatalf("record made before the mark = %+v, %v, %v; want Last %v and no mark, Spec or Due", rec, ok, err, last)
	}
	alive := last.Add(time.Hour)
	if ok, err := store.AdvanceRecurring(ctx, bus.RecurringAdvance{Name: "old", Generation: 1, Fingerprint: "fp", From: last, Last: last,
		Alive: alive, Due: alive, Runs: 2, Skipped: 1}); err != nil || !ok {
		t.Fatalf("AdvanceRecurring = %v, %v", ok, err)
	}
	if rec, _, _ := store.LoadRecurring(ctx, "old"); !rec.Alive.Equal(alive) || !rec.Due.Equal(alive) || rec.Runs != 2 || rec.Skipped != 1 {
		t.Fatalf("record after an advance = %+v, want Alive and Due %v, Runs 2, Skipped 1", rec, alive)
	}
	// Declared in code, it is never claimed; made at runtime, it is.
	if got, err := store.ClaimDueRecurring(ctx, alive, 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("claim of a record declared in code = %+v, %v; want none", got, err)
	}
	if _, changed, err := store.DeclareRecurring(ctx, bus.RecurringRecord{Name: "old", Fingerprint: "fp2", Schedule: "@every 1h",
		Spec: []byte(`{}`), Due: last}); err != nil || !changed {
		t.Fatalf("DeclareRecurring = %v, %v", changed, err)
	}
	if got, err := store.ClaimDueRecurring(ctx, alive, 10, time.Minute); err != nil || len(got) != 1 || got[0].Name != "old" ||
		!got[0].Due.Equal(last) || got[0].Runs != 2 {
		t.Fatalf("claim of the runtime record = %+v, %v; want it, with its Due and Runs", got, err)
	}
}

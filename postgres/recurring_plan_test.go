package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus/postgres"
)

// TestRuntimeRecurringPlansReadTheRowsTheyReturn claims the 5 runtime
// schedules due among 40,000 records (20,000 runtime ones due later, and
// 20,000 declared in code, due or not) and pages through a prefix, with
// custom and generic plans, before and after ANALYZE: each reads the
// partial due index or the primary key from where its rows start, and
// never scans the table.
func TestRuntimeRecurringPlansReadTheRowsTheyReturn(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, 2*time.Minute)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, stmt := range []string{
		`INSERT INTO ` + p.RecurringTable() + ` (name, fingerprint, schedule, generation, spec, due_at)
SELECT 'later-' || lpad(i::text, 6, '0'), 'fp', '@every 1h', 1, '\x7b7d', $1::timestamptz + i * interval '1 second' FROM generate_series(1, 20000) i`,
		`INSERT INTO ` + p.RecurringTable() + ` (name, fingerprint, schedule, generation, due_at)
SELECT 'code-' || lpad(i::text, 6, '0'), 'fp', '@every 1h', 1, $1::timestamptz - interval '1 hour' FROM generate_series(1, 20000) i`,
		`INSERT INTO ` + p.RecurringTable() + ` (name, fingerprint, schedule, generation, spec, due_at)
SELECT 'due-' || i, 'fp', '@every 1h', 1, '\x7b7d', $1::timestamptz - i * interval '1 second' FROM generate_series(1, 5) i`,
	} {
		if _, err := pool.Exec(ctx, stmt, now); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	simple := pgx.QueryExecModeSimpleProtocol
	lit := func(t time.Time) string { return "'" + t.Format(time.RFC3339Nano) + "'" }
	generic := func(sql, args string) string {
		t.Helper()
		if _, err := conn.Exec(ctx, "PREPARE rec_plan AS "+sql, simple); err != nil {
			t.Fatalf("PREPARE: %v", err)
		}
		defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE rec_plan", simple) }()
		return explain(t, conn, "force_generic_plan", "EXECUTE rec_plan("+args+")", simple)
	}
	claimArgs := lit(now) + ", " + lit(now.Add(time.Minute)) + ", 500"
	pageArgs := "100, '', 'later-0100', 'later-0101'"
	for _, phase := range []string{"fresh", "analyzed"} {
		if phase == "analyzed" {
			if _, err := pool.Exec(ctx, "ANALYZE "+p.RecurringTable()); err != nil {
				t.Fatal(err)
			}
		}
		plans := map[string]string{
			"claim, custom plan":  explain(t, conn, "force_custom_plan", postgres.ClaimRecurringSQL(p), now, now.Add(time.Minute), 500),
			"claim, generic plan": generic(postgres.ClaimRecurringSQL(p), claimArgs),
			"page, custom plan":   explain(t, conn, "force_custom_plan", postgres.RecurringPageSQL(p), 100, "", "later-0100", "later-0101"),
			"page, generic plan":  generic(postgres.RecurringPageSQL(p), pageArgs),
		}
		for name, plan := range plans {
			if strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, %s scans the table:\n%s", phase, name, plan)
			}
			// 5 due, a page of 100; an index may also hold the versions a
			// rolled-back EXPLAIN left.
			most := map[bool]int{true: 20, false: 200}[strings.HasPrefix(name, "claim")]
			for line := range strings.Lines(plan) {
				var n int
				_, rest, ok := strings.Cut(line, "Index Scan")
				if _, after, found := strings.Cut(rest, "(actual rows="); ok && found {
					if _, err := fmt.Sscanf(after, "%d", &n); err != nil || n > most {
						t.Errorf("%s, %s reads %d index entries, want at most %d:\n%s", phase, name, n, most, plan)
					}
				}
			}
		}
	}
}

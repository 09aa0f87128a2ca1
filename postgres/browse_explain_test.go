package postgres_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// fillOperations inserts scheduled rows (a tenth of them due, the rest over
// the next day, of four types, a fifth of them another transport's) and
// failed messages (half in eight large groups, the rest each its own),
// then VACUUM ANALYZEs both tables, as autovacuum would.
func fillOperations(t testing.TB, pool *pgxpool.Pool, p *postgres.Persistence, scheduled, failed int) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Minute)
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, envelope, due_at, available_at, transport, message_type)
		SELECT 'row-' || lpad(g::text, 8, '0'), 1, decode(repeat('ab', 300), 'hex'), d, d,
		       CASE WHEN g %% 5 = 1 THEN 'other' ELSE $1 END, 'type.T' || (g %% 4)
		FROM generate_series(1, $2::int) AS g,
		LATERAL (SELECT now() + CASE WHEN g %% 10 = 0 THEN -interval '1 minute' ELSE interval '1 second' END
		                      * (g::float8 / $2 * 86400) AS d) AS due`, p.Table()), testTransport, scheduled)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, message_type, endpoint, queue, kind, reason, failure_group,
		attempts, failures, first_failed, last_failed, envelope)
		SELECT 'failed-' || lpad(g::text, 8, '0'), 'type.T' || (g %% 4), 'endpoint', 'endpoint', 'handler',
		       'order ' || g || ' not found', CASE WHEN g %% 2 = 0 THEN 'group-' || (g %% 16) ELSE 'single-' || g END,
		       5, 1, f, f, decode(repeat('cd', 400), 'hex')
		FROM generate_series(1, $1::int) AS g, LATERAL (SELECT now() - g * interval '1 second' AS f) AS t`, postgres.FailedTable(p)), failed)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{p.Table(), postgres.FailedTable(p)} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOperationsQueriesUseIndexes is the proof that what operators run
// (the CLI, the console) reads indexes, never the whole table: 50,000
// scheduled rows and 20,000 failed messages, then EXPLAIN ANALYZE of every
// statement, with custom and generic plans. Run with -v to print the plans.
func TestOperationsQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	fillOperations(t, pool, p, 50_000, 20_000)
	now := time.Now()
	type check struct {
		name  string
		sql   string
		args  []any
		index string // the index the plan must use
	}
	list := func(q bus.ScheduledQuery) (string, []any) { return postgres.ListScheduledSQL(p, q) }
	var checks []check
	add := func(name, index, sql string, args ...any) {
		checks = append(checks, check{name, sql, args, index})
	}
	sql, args := list(bus.ScheduledQuery{})
	add("list scheduled", "outgoing_messages_due_idx", sql, args...)
	sql, args = list(bus.ScheduledQuery{AfterDue: now.Add(6 * time.Hour), AfterID: "row-x", DueBefore: now.Add(12 * time.Hour), Limit: 50})
	add("list scheduled, page in a window", "outgoing_messages_due_idx", sql, args...)
	sql, args = list(bus.ScheduledQuery{Type: "type.T2", DueAfter: now, Limit: 50})
	add("list scheduled by type", "outgoing_messages_type_due_idx", sql, args...)
	sql, args = postgres.StatsSQL(p)
	add("stats", "outgoing_messages_claim_idx", sql, args...)
	add("histogram", "outgoing_messages_due_idx", postgres.HistogramSQL(p), time.Minute, now, now.Add(time.Hour))
	sql, args = postgres.ListFailedSQL(p, bus.FailedQuery{})
	add("list failed", "outgoing_messages_failed_last_idx", sql, args...)
	sql, args = postgres.ListFailedSQL(p, bus.FailedQuery{BeforeFailed: now.Add(-time.Hour), BeforeID: "x", Limit: 20})
	add("list failed, next page", "outgoing_messages_failed_last_idx", sql, args...)
	sql, args = postgres.ListFailedSQL(p, bus.FailedQuery{Group: "group-4", Limit: 20})
	add("list failed of a group", "outgoing_messages_failed_grp_idx", sql, args...)
	sql, args = postgres.CountFailedSQL(p, bus.FailedQuery{Group: "group-4"})
	add("count failed of a group", "outgoing_messages_failed_grp_idx", sql, args...)
	sql, args = postgres.ListFailedSQL(p, bus.FailedQuery{Search: "failed-00000042"})
	add("search failed by ID", "outgoing_messages_failed_pkey", sql, args...)
	add("failed groups", "outgoing_messages_failed_grp_idx", postgres.FailedGroupsSQL(p), 20)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range checks {
			// Where a query must read a whole index (the groups, the
			// capped count), the planner weighs that against reading the
			// table, and the weight depends on the visibility map, which
			// other transactions on a shared server keep VACUUM from
			// setting. With enable_seqscan off it still reads the table if,
			// and only if, no index serves the query: what this test proves.
			plan := explain(t, pool, mode+", enable_seqscan = off", c.sql, c.args...)
			t.Logf("%s, %s:\n%s", mode, c.name, plan)
			if !strings.Contains(plan, c.index) || unboundedSeqScan(plan) {
				t.Errorf("%s: %s does not read the index %s:\n%s", mode, c.name, c.index, plan)
			}
		}
	}
}

// unboundedSeqScan reports whether plan reads a table from end to end: a
// Seq Scan that is not directly under a Limit. StatsScheduled's exact count
// reads at most exactCountLimit+1 rows by design; the planner may take them
// from the table rather than an index (it does when concurrent transactions
// keep VACUUM from marking pages all-visible), and that is bounded work.
func unboundedSeqScan(plan string) bool {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if strings.Contains(l, "Seq Scan") && (i == 0 || !strings.Contains(lines[i-1], "Limit")) {
			return true
		}
	}
	return false
}

// BenchmarkOperationsQueries times what the console's overview and the
// failed page run, behind 1,000,000 scheduled rows and 100,000 failed
// messages (setting them up takes a minute).
func BenchmarkOperationsQueries(b *testing.B) {
	pool := testPool(b)
	p := newStore(b, pool, postgres.Options{})
	fillOperations(b, pool, p, 1_000_000, 100_000)
	ctx := context.Background()
	now := time.Now()
	run := func(name string, fn func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("StatsScheduled", func() error { _, err := p.StatsScheduled(ctx, now); return err })
	run("DueHistogramHourByMinute", func() error { _, err := p.DueHistogram(ctx, now, time.Minute, 60); return err })
	run("DueHistogramDayByQuarterHour", func() error { _, err := p.DueHistogram(ctx, now, 15*time.Minute, 96); return err })
	run("ListScheduled", func() error { _, err := p.ListScheduled(ctx, bus.ScheduledQuery{Limit: 50}); return err })
	run("ListScheduledByType", func() error {
		_, err := p.ListScheduled(ctx, bus.ScheduledQuery{Type: "type.T3", DueAfter: now.Add(12 * time.Hour), Limit: 50})
		return err
	})
	run("FailedGroups", func() error { _, err := p.FailedGroups(ctx, 20); return err })
	run("ListFailed", func() error { _, err := p.ListFailed(ctx, bus.FailedQuery{Limit: 50}); return err })
	run("CountFailedAll", func() error { _, err := p.CountFailed(ctx, bus.FailedQuery{}); return err })
	run("CountFailedGroup", func() error { _, err := p.CountFailed(ctx, bus.FailedQuery{Group: "group-4"}); return err })
}

// TestDueHistogramEstimatesLargeWindows checks the estimate DueHistogram
// gives for a window too large to count: 150,000 rows spread over a day,
// 20,000 more at one instant (a batch scheduled for 9 o'clock), ANALYZEd;
// each hour's estimate is compared with its exact count.
func TestDueHistogramEstimatesLargeWindows(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, 2*time.Minute)
	from := time.Now().Truncate(time.Hour).Add(time.Hour)
	batch := from.Add(9*time.Hour + 30*time.Minute)
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, envelope, due_at, available_at, transport)
		SELECT 'row-' || g, 1, '\x00', d, d, 't'
		FROM generate_series(1, 170000) AS g,
		LATERAL (SELECT CASE WHEN g > 150000 THEN $2::timestamptz
		                     ELSE $1::timestamptz + (g::float8 / 150000 * 86400 * power(g::float8 / 150000, 0.5)) * interval '1 second' END AS d) AS due`,
		p.Table()), from, batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+p.Table()); err != nil {
		t.Fatal(err)
	}
	got, err := p.DueHistogram(ctx, from, time.Hour, 24)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT count(*) FROM generate_series(0, 23) AS h
		LEFT JOIN %s o ON o.due_at >= $1::timestamptz + h * interval '1 hour' AND o.due_at < $1::timestamptz + (h + 1) * interval '1 hour'
		GROUP BY h ORDER BY h`, p.Table()), from)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	var sumGot, sumExact int64
	for h := range 24 {
		sumGot, sumExact = sumGot+got[h], sumExact+exact[h]
		if diff := math.Abs(float64(got[h] - exact[h])); exact[h] >= 2000 && diff > 0.25*float64(exact[h]) {
			t.Errorf("hour %d: estimated %d, exact %d", h, got[h], exact[h])
		}
	}
	if math.Abs(float64(sumGot-sumExact)) > 0.1*float64(sumExact) {
		t.Errorf("estimated %d rows in the day, exact %d", sumGot, sumExact)
	}
	t.Logf("estimated %v\nexact     %v", got, exact)
}

package sqlite_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// fillOperations inserts scheduled rows over the next day (of four types)
// and failed messages (half of them in eight groups) with SQL, then
// ANALYZEs.
func fillOperations(t testing.TB, p *sqlite.Persistence, scheduled, failed int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixNano()
	_, err := p.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
INSERT INTO outgoing_messages (id, kind, envelope, due_at, available_at, created_at, transport, message_type)
SELECT printf('row-%08d', n), 1, zeroblob(300), ?2 + n * (86400000000000 / ?1), ?2 + n * (86400000000000 / ?1), ?2,
       CASE WHEN n % 5 = 1 THEN 'other' ELSE 't' END, 'type.T' || (n % 4) FROM g`, scheduled, now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
INSERT INTO outgoing_messages_failed (id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures,
	first_failed, last_failed, envelope)
SELECT printf('failed-%08d', n), 'type.T' || (n % 4), 'endpoint', 'endpoint', 'handler', 'order ' || n || ' not found',
       CASE WHEN n % 2 = 0 THEN 'group-' || (n % 16) ELSE 'single-' || n END, 5, 1,
       ?2 - n * 1000000000, ?2 - n * 1000000000, zeroblob(400) FROM g`, failed, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// TestOperationsQueriesUseIndexes shows that what operators run reads
// indexes: no query plan scans a table without one. Run with -v to print
// the plans.
func TestOperationsQueriesUseIndexes(t *testing.T) {
	p := openTemp(t)
	fillOperations(t, p, 20_000, 20_000)
	now := time.Now()
	type check struct {
		name, sql string
		args      []any
	}
	var checks []check
	add := func(name, sql string, args ...any) { checks = append(checks, check{name, sql, args}) }
	sql, args := sqlite.ListScheduledSQL(p, bus.ScheduledQuery{})
	add("list scheduled", sql, args...)
	sql, args = sqlite.ListScheduledSQL(p, bus.ScheduledQuery{AfterDue: now.Add(time.Hour), AfterID: "row-x", DueBefore: now.Add(2 * time.Hour)})
	add("list scheduled, next page", sql, args...)
	sql, args = sqlite.ListScheduledSQL(p, bus.ScheduledQuery{Type: "type.T2", DueAfter: now})
	add("list scheduled by type", sql, args...)
	add("histogram", sqlite.HistogramSQL(p), now.UnixNano(), time.Minute.Nanoseconds(), now.Add(time.Hour).UnixNano())
	sql, args = sqlite.ListFailedSQL(p, bus.FailedQuery{BeforeFailed: now, BeforeID: "x"})
	add("list failed", sql, args...)
	sql, args = sqlite.ListFailedSQL(p, bus.FailedQuery{Group: "group-4"})
	add("list failed of a group", sql, args...)
	sql, args = sqlite.CountFailedSQL(p, bus.FailedQuery{Group: "group-4"})
	add("count failed of a group", sql, args...)
	add("failed groups", sqlite.FailedGroupsSQL(p), 20)
	for _, c := range checks {
		rows, err := p.DB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		_ = rows.Close()
		text := strings.Join(plan, "\n")
		t.Logf("%s:\n%s", c.name, text)
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, " USING ") && !strings.HasPrefix(line, "SCAN g") {
				t.Errorf("%s scans a table without an index:\n%s", c.name, text)
			}
			if strings.Contains(line, "USE TEMP B-TREE FOR ORDER BY") && c.name != "failed groups" {
				t.Errorf("%s sorts instead of reading an index in order:\n%s", c.name, text)
			}
		}
	}
}

// BenchmarkOperationsQueries times the operators' queries behind 1,000,000
// scheduled rows and 100,000 failed messages.
func BenchmarkOperationsQueries(b *testing.B) {
	p := openTemp(b)
	fillOperations(b, p, 1_000_000, 100_000)
	ctx := context.Background()
	now := time.Now()
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"StatsScheduled", func() error { _, err := p.StatsScheduled(ctx, now); return err }},
		{"DueHistogramHourByMinute", func() error { _, err := p.DueHistogram(ctx, now, time.Minute, 60); return err }},
		{"ListScheduled", func() error { _, err := p.ListScheduled(ctx, bus.ScheduledQuery{Limit: 50}); return err }},
		{"FailedGroups", func() error { _, err := p.FailedGroups(ctx, 20); return err }},
		{"ListFailed", func() error { _, err := p.ListFailed(ctx, bus.FailedQuery{Limit: 50}); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.fn(); err != nil {
					b.Fatal(fmt.Errorf("%s: %w", c.name, err))
				}
			}
		})
	}
}

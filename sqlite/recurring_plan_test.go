package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// fillRecurring inserts n runtime records due over the next day, n/10
// declared in code and n/10 tombstones with SQL, then ANALYZEs.
func fillRecurring(t testing.TB, p *sqlite.Persistence, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixNano()
	_, err := p.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
INSERT INTO outgoing_messages_recurring (name, fingerprint, schedule, generation, updated_at, spec, due_at)
SELECT printf('tenant-%08d', n), CASE WHEN n % 10 = 0 THEN '' ELSE 'fp' END, '@every 24h', 1, ?2,
       CASE WHEN n % 10 IN (0, 1) THEN NULL ELSE zeroblob(200) END,
       CASE WHEN n % 10 = 0 THEN 0 ELSE ?2 + 60000000000 + n * (86400000000000 / ?1) END FROM g`, n, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeRecurringQueriesUseIndexes shows that a claim of due runtime
// records reads the partial index in order, and a page the primary key:
// neither scans the table nor sorts. Run with -v to print the plans.
func TestRuntimeRecurringQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	fillRecurring(t, p, 20_000)
	now := time.Now().UnixNano()
	for _, c := range []struct {
		name, sql, index string
		args             []any
	}{
		{"claim", sqlite.ClaimDueSQL(p), "outgoing_messages_recurring_due_idx", []any{now, 500}},
		{"page", sqlite.ListPageSQL(p), "sqlite_autoindex_outgoing_messages_recurring_1", []any{"tenant-00011", "tenant-0001", "tenant-0002", 100}},
	} {
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
		if len(plan) != 1 || !strings.HasPrefix(plan[0], "SEARCH ") || !strings.Contains(plan[0], c.index) {
			t.Errorf("%s does not search %s alone:\n%s", c.name, c.index, text)
		}
	}
}

// The prefix of a page is literal: '_' and '%' match themselves, not any
// character as in LIKE.
func TestRuntimeRecurringPagePrefixIsLiteral(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx := t.Context()
	for _, name := range []string{"t_a", "t_b", "tXa", "t", "t_", "u"} {
		if _, _, err := p.DeclareRecurring(ctx, bus.RecurringRecord{Name: name, Fingerprint: "fp", Schedule: "@every 1m"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		prefix, after string
		want          []string
	}{
		{"t_", "", []string{"t_", "t_a", "t_b"}},
		{"t_", "t_", []string{"t_a", "t_b"}},
		{"t%", "", nil},
		{"", "t_", []string{"t_a", "t_b", "u"}}, // byte order: "tXa" < "t_"
		{"t", "", []string{"t", "tXa", "t_", "t_a", "t_b"}},
	} {
		page, err := p.ListRecurringPage(ctx, c.prefix, c.after, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ListRecurringPage(%q, %q) = %v, want %v", c.prefix, c.after, got, c.want)
		}
	}
}

// Claims from two handles on one file, as from two processes, never take
// the same record: SQLite lets one writer at a time hold the file.
func TestRuntimeRecurringClaimsFromTwoHandlesSplitTheRecords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "postbus.db")
	var handles []*sqlite.Persistence
	for range 2 {
		p, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		if err := p.Setup(t.Context()); err != nil {
			t.Fatal(err)
		}
		handles = append(handles, p)
	}
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	const n = 200
	for i := range n {
		if _, _, err := handles[0].DeclareRecurring(ctx, bus.RecurringRecord{Name: fmt.Sprintf("r-%03d", i), Fingerprint: "fp",
			Schedule: "@every 1m", Spec: []byte(`{}`), Due: now.Add(-time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := range 4 {
		p := handles[i%2]
		wg.Go(func() {
			for {
				recs, err := p.ClaimDueRecurring(ctx, now, 7, time.Minute)
				if err != nil {
					t.Errorf("ClaimDueRecurring: %v", err)
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range recs {
					seen[r.Name]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("claimed %d records, want %d", len(seen), n)
	}
	for name, k := range seen {
		if k != 1 {
			t.Errorf("%s claimed %d times", name, k)
		}
	}
}

// BenchmarkClaimDueRecurring times a claim among 1,000 and 100,000 stored
// records: none due (a poll between ticks), and 10 due (claimed, then made
// due again). The cost stays the same: it grows with the records due.
func BenchmarkClaimDueRecurring(b *testing.B) {
	for _, stored := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("Stored%d", stored), func(b *testing.B) {
			p := openTemp(b)
			fillRecurring(b, p, stored)
			benchmarkClaims(b, p)
		})
	}
}

func benchmarkClaims(b *testing.B, p *sqlite.Persistence) {
	ctx := context.Background()
	b.Run("NoneDue", func(b *testing.B) {
		for b.Loop() {
			if recs, err := p.ClaimDueRecurring(ctx, time.Now(), 500, time.Minute); err != nil || len(recs) != 0 {
				b.Fatal(len(recs), err)
			}
		}
	})
	b.Run("TenDue", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if _, err := p.DB().ExecContext(ctx, `UPDATE outgoing_messages_recurring SET due_at = 1 WHERE name IN
	(SELECT name FROM outgoing_messages_recurring WHERE spec IS NOT NULL AND due_at > 0 ORDER BY due_at, name LIMIT 10)`); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if recs, err := p.ClaimDueRecurring(ctx, time.Now(), 500, time.Minute); err != nil || len(recs) != 10 {
				b.Fatal(len(recs), err)
			}
		}
	})
}

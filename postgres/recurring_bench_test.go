package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus/postgres"
)

// BenchmarkClaimDueRecurring claims the 10 runtime schedules due among
// stored ones due much later: the cost per claim should not grow with the
// schedules stored.
func BenchmarkClaimDueRecurring(b *testing.B) {
	pool := testPool(b)
	for _, stored := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			p := newStore(b, pool, postgres.Options{})
			ctx := b.Context()
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			for _, st := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO ` + p.RecurringTable() + ` (name, fingerprint, schedule, generation, spec, due_at)
SELECT 'later-' || i, 'fp', '@every 1h', 1, '\x7b7d', $1::timestamptz + interval '100 years' + i * interval '1 second'
FROM generate_series(1, $2::int) i`, []any{t0, stored}},
				{`INSERT INTO ` + p.RecurringTable() + ` (name, fingerprint, schedule, generation, spec, due_at)
SELECT 'hot-' || i, 'fp', '@every 1h', 1, '\x7b7d', $1::timestamptz FROM generate_series(1, 10) i`, []any{t0}},
				{`ANALYZE ` + p.RecurringTable(), nil},
			} {
				if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				// Each claim moves the hot ones half a second ahead; the next
				// claims them a second later.
				got, err := p.ClaimDueRecurring(ctx, t0.Add(time.Duration(i)*time.Second), 100, 500*time.Millisecond)
				if err != nil || len(got) != 10 {
					b.Fatalf("claim %d = %d records, %v; want 10", i, len(got), err)
				}
			}
		})
	}
}

package mysql

import "time"

// ClaimRecurringQuery returns the SELECT of p.ClaimDueRecurring(ctx, now,
// limit, …) and its arguments, for a test to EXPLAIN.
func ClaimRecurringQuery(p *Persistence, now time.Time, limit int) (string, []any) {
	return recurringSQL(p.n).ClaimSelect, []any{micros(now), limit}
}

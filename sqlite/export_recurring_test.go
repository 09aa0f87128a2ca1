package sqlite

// The statements of runtime schedules, for their query-plan test.
func ClaimDueSQL(p *Persistence) string { return recurringSQL(p.q.table).ClaimSelect }
func ListPageSQL(p *Persistence) string { return recurringSQL(p.q.table).PageBefore }

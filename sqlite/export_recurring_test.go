package sqlite

// The statements of runtime schedules, for their query-plan test.
func ClaimDueSQL(p *Persistence) string { return p.claimDueSQL() }
func ListPageSQL(p *Persistence) string { return p.listPageSQL(true) }

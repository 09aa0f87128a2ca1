package postgres

// ClaimSQL and NextDueSQL expose the statements to the EXPLAIN test.
func ClaimSQL(p *Persistence) string   { return p.sql.claim }
func NextDueSQL(p *Persistence) string { return p.sql.nextDue }

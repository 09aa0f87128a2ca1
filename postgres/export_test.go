package postgres

// ClaimSQL and NextDueSQL expose the statements to the EXPLAIN test.
func ClaimSQL(p *Persistence) string   { return p.sql.claim }
func NextDueSQL(p *Persistence) string { return p.sql.nextDue }

// InsertSQL is the plain INSERT of a Persistence on table, for the
// ceiling benchmark.
func InsertSQL(table string) string { return newStatements(names{table: table}, false).insert }

package postgres

import (
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// ClaimSQL and NextDueSQL expose the statements to the EXPLAIN test.
func ClaimSQL(p *Persistence) string   { return p.sql.claim }
func AheadSQL(p *Persistence) string   { return p.sql.ahead }
func NextDueSQL(p *Persistence) string { return p.sql.nextDue }

// InsertSQL is the plain INSERT of a Persistence on table, for the
// ceiling benchmark.
func InsertSQL(table string) string { return newStatements(names{table: table}, false).insert }

// The operations statements, for their EXPLAIN test.
func ListScheduledSQL(p *Persistence, q bus.ScheduledQuery) (string, []any) {
	return sqlstore.ListScheduledSQL(p.browser, q)
}
func StatsSQL(p *Persistence) (string, []any) { return statsSQL(p.names), []any{p.names.regTbl} }
func HistogramSQL(p *Persistence) string      { return histogramSQL(p.names.table) }
func ListFailedSQL(p *Persistence, q bus.FailedQuery) (string, []any) {
	return sqlstore.ListFailedSQL(p.failed, q)
}
func CountFailedSQL(p *Persistence, q bus.FailedQuery) (string, []any) {
	return sqlstore.CountFailedSQL(p.failed, q)
}
func FailedGroupsSQL(p *Persistence) string {
	sql, _ := sqlstore.FailedGroupsSQL(p.failed, 0)
	return sql
}
func FailedTable(p *Persistence) string { return p.names.failed }

// The runtime recurring statements, for their EXPLAIN test.
func ClaimRecurringSQL(p *Persistence) string { return claimRecurringSQL(p.names) }
func RecurringPageSQL(p *Persistence) string {
	return recurringPageSQL(p.names, "name > $2 AND name >= $3 AND name < $4")
}

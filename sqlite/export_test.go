package sqlite

import "github.com/postbus/bus"

// The operations statements, for their query-plan test.
func ListScheduledSQL(p *Persistence, q bus.ScheduledQuery) (string, []any) {
	return p.listScheduledSQL(q)
}
func HistogramSQL(p *Persistence) string { return p.histogramSQL() }
func ListFailedSQL(p *Persistence, q bus.FailedQuery) (string, []any) {
	return p.listFailedSQL(q)
}
func CountFailedSQL(p *Persistence, q bus.FailedQuery) (string, []any) {
	where, args := failedWhere(q, false)
	return "SELECT count(*) FROM " + p.failedTable() + where, args
}
func FailedGroupsSQL(p *Persistence) string { return p.failedGroupsSQL() }

package sqlite

import (
	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// The operations statements, for their query-plan test.
func ListScheduledSQL(p *Persistence, q bus.ScheduledQuery) (string, []any) {
	return sqlstore.ListScheduledSQL(p.browser, q)
}
func HistogramSQL(p *Persistence) string { return p.histogramSQL() }
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

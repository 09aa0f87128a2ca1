package sqlite

import (
	"github.com/postbus/bus/backend/sqlstore"
)

// settler is DeleteOutgoing, ReleaseOutgoing and RecordOutgoingFailures,
// on leases (sqlstore.NewLeases): a settlement checks the row's lease
// token, so a row re-claimed by someone else, cancelled, stored again, or
// unknown is left alone. A dispatcher settles the rows of one claim, so
// that is one statement; several tokens, and failures, run in one
// transaction.
type settler = sqlstore.Settler

// newSettler returns the settling methods of p.
func newSettler(p *Persistence) *settler {
	return sqlstore.NewLeases(p.dialect, sqlstore.FromDB(p.db, nil), sqlstore.LeaseSQL{
		Delete:  p.q.deleteIDs,
		Release: p.q.releaseIDs,
		Fail:    p.q.recordFail,
		IDs:     func(ids []string) any { return idList(ids) },
	}, p.now, sqlstore.SettleOps{Delete: "delete", Release: "release", Fail: "record failures"})
}

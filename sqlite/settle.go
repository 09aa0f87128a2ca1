package sqlite

import (
	"context"
	"database/sql"

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

// execer is what *sql.DB and *sql.Tx have in common here.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// execCount runs one statement and returns how many rows it changed.
func execCount(ctx context.Context, db execer, stmt string, args ...any) (int, error) {
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

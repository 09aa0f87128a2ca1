package sqlstore

import (
	"context"
	"time"

	"github.com/postbus/bus/backend"
)

// LeaseSQL is the settling statements of a store whose claims lease their
// rows (a lease token and a lease end written on each row) rather than
// lock them.
type LeaseSQL struct {
	// Delete deletes the rows that a token still leases. Parameters: the
	// token, the IDs (as IDs encodes them).
	Delete string
	// Release ends the leases of the rows that a token still leases, each
	// claimable again when it was before its claim. Parameters: as Delete.
	Release string
	// Fail counts a failure on a row its token still leases, keeps the
	// error text and ends the lease, the row claimable again at the retry
	// time. Parameters: the error text, the retry time, the ID, the token.
	Fail string
	// IDs encodes a list of IDs as one parameter.
	IDs func(ids []string) any
}

// NewLeases returns the settling methods of a store whose claims lease
// their rows, on db, with now the store's clock; its errors name ops. The
// settlements of one token are one statement, autocommitted; of several
// tokens, and every record of failures, one transaction (which reads the
// clock once it has begun).
func NewLeases(d *Dialect, db DB, sql LeaseSQL, now func() time.Time, ops SettleOps) *Settler {
	l := &leases{d: d, db: db, sql: sql, now: now}
	return &Settler{d: d, ops: ops, settle: l.settle}
}

type leases struct {
	d   *Dialect
	db  DB
	sql LeaseSQL
	now func() time.Time
}

func (l *leases) settle(ctx context.Context, kind settleKind, claims []backend.Claim, failures []backend.OutgoingFailure) (int, error) {
	order, groups := byToken(claims)
	if len(order) == 0 {
		return 0, ctx.Err()
	}
	stmt := l.sql.Delete
	if kind == settleRelease {
		stmt = l.sql.Release
	}
	ids := func(token string) []string {
		out := make([]string, len(groups[token]))
		for j, i := range groups[token] {
			out[j] = claims[i].ID
		}
		return out
	}
	if kind != settleFail && len(order) == 1 {
		n, err := l.db.Exec(ctx, stmt, order[0], l.sql.IDs(ids(order[0])))
		return int(n), err
	}
	tx, err := l.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = Rollback(ctx, tx) }()
	now := l.now() // read under the write lock, like a claim's
	var total int64
	for _, token := range order {
		if kind != settleFail {
			n, err := tx.Exec(ctx, stmt, token, l.sql.IDs(ids(token)))
			if err != nil {
				return 0, err
			}
			total += n
			continue
		}
		for _, i := range groups[token] {
			f := &failures[i]
			retry := f.RetryAt
			if f.RetryAfter > 0 {
				retry = now.Add(f.RetryAfter)
			}
			n, err := tx.Exec(ctx, l.sql.Fail, f.Error, l.d.Times.Arg(retry), f.ID, f.Token)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return int(total), nil
}

package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/postbus/bus"
)

// DeleteOutgoing removes the claimed rows that their lease tokens still
// hold and returns how many it removed. A row re-claimed by someone else,
// cancelled, stored again, or unknown is left alone.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleByToken(ctx, p.q.deleteIDs, claims)
	if err != nil {
		return n, fmt.Errorf("sqlite: delete: %w", err)
	}
	return n, nil
}

// ReleaseOutgoing ends the leases of the claimed rows that their tokens
// still hold, without counting a failure, and returns how many it
// released. Each row is claimable again when it was before its claim (its
// due time, or the end of a failure's backoff).
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n, err := p.settleByToken(ctx, p.q.releaseIDs, claims)
	if err != nil {
		return n, fmt.Errorf("sqlite: release: %w", err)
	}
	return n, nil
}

// settleByToken runs stmt (parameters: a token and a JSON array of IDs)
// once per distinct token. A dispatcher settles the rows of one claim, so
// that is one statement; several tokens run in one transaction.
func (p *Persistence) settleByToken(ctx context.Context, stmt string, claims []bus.Claim) (int, error) {
	if len(claims) == 0 {
		return 0, ctx.Err()
	}
	var order []string
	byToken := map[string][]string{}
	for _, c := range claims {
		if c.Token == "" {
			continue // never a claim's token: it holds nothing
		}
		if _, ok := byToken[c.Token]; !ok {
			order = append(order, c.Token)
		}
		byToken[c.Token] = append(byToken[c.Token], c.ID)
	}
	switch len(order) {
	case 0:
		return 0, ctx.Err()
	case 1:
		return execCount(ctx, p.db, stmt, order[0], idList(byToken[order[0]]))
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	total := 0
	for _, token := range order {
		n, err := execCount(ctx, tx, stmt, token, idList(byToken[token]))
		if err != nil {
			return 0, err
		}
		total += n
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return total, nil
}

// RecordOutgoingFailures counts a failure on each row its token still
// holds, keeps the error text, ends the lease, and makes the row claimable
// again RetryAfter after the store's now (at RetryAt when RetryAfter is not
// positive), all in one transaction. It returns how many rows it changed.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	if len(failures) == 0 {
		return 0, ctx.Err()
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlite: record failures: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, p.q.recordFail)
	if err != nil {
		return 0, fmt.Errorf("sqlite: record failures: %w", err)
	}
	defer func() { _ = stmt.Close() }()
	now := p.now() // read under the write lock, like a claim's
	total := 0
	for _, f := range failures {
		if f.Token == "" {
			continue
		}
		retry := f.RetryAt
		if f.RetryAfter > 0 {
			retry = now.Add(f.RetryAfter)
		}
		res, err := stmt.ExecContext(ctx, f.Error, nanos(retry), f.ID, f.Token)
		if err != nil {
			return 0, fmt.Errorf("sqlite: record failures: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("sqlite: record failures: %w", err)
		}
		total += int(n)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlite: record failures: %w", err)
	}
	return total, nil
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

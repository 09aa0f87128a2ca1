package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/postbus/bus/backend"
)

// ClaimDueRecurring returns up to limit runtime records due at now,
// earliest Due first (ties by name), and moves their Due to now plus
// lease, atomically: the records are locked as they are picked, skipping
// (not waiting for) those another claim holds, so that of several
// claimers, in one process or several, one gets each record. The records
// returned carry the Due the claim replaced. With RecurringSQL.Claim it is
// one statement; otherwise one transaction selects the records and moves
// them, and ClaimProbe, when set, first looks for one due without
// starting it.
func (r *Recurrings) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]backend.RecurringRecord, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	recs, err := r.claim(ctx, now, limit, lease)
	if err != nil {
		return nil, r.d.Errorf("claim due recurring: %w", err)
	}
	slices.SortFunc(recs, func(a, b backend.RecurringRecord) int {
		return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.Name, b.Name))
	})
	return recs, nil
}

func (r *Recurrings) claim(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]backend.RecurringRecord, error) {
	due := r.d.Times.Arg(now.Add(lease))
	if r.sql.Claim != "" {
		return r.query(ctx, r.db, r.sql.Claim, r.d.Times.Arg(now), due, limit)
	}
	if r.sql.ClaimProbe != "" {
		var n int
		if err := r.db.QueryRow(ctx, r.sql.ClaimProbe, r.d.Times.Arg(now)).Scan(&n); err != nil || n == 0 {
			return nil, err
		}
	}
	var out []backend.RecurringRecord
	err := r.inTx(ctx, func(tx Tx) error {
		recs, err := r.query(ctx, tx, r.sql.ClaimSelect, r.d.Times.Arg(now), limit)
		if out = nil; err != nil || len(recs) == 0 {
			return err
		}
		args := make([]any, 0, len(recs)+1)
		args = append(args, due)
		for _, rec := range recs {
			args = append(args, r.d.T(rec.Name))
		}
		if _, err := tx.Exec(ctx, r.sql.ClaimMove+"("+strings.Repeat("?, ", len(recs)-1)+"?)", args...); err != nil {
			return err
		}
		out = recs
		return nil
	})
	return out, err
}

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after, by name (byte order). The prefix is a
// range of the primary key (from prefix to the least string after every
// string that starts with it), not a LIKE pattern: its '_' and '%' are
// plain characters, and a page reads its rows alone.
func (r *Recurrings) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]backend.RecurringRecord, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	var stmt string
	var args []any
	if r.hooks.Page != nil {
		stmt, args = r.hooks.Page(prefix, after, limit)
	} else {
		stmt, args = r.sql.Page, []any{r.d.T(after), r.d.T(prefix)}
		if end, ok := recurringPrefixEnd(prefix); ok {
			stmt, args = r.sql.PageBefore, append(args, r.d.T(end))
		}
		args = append(args, limit)
	}
	recs, err := r.query(ctx, r.db, stmt, args...)
	if err != nil {
		return nil, r.d.Errorf("list recurring page: %w", err)
	}
	return recs, nil
}

// recurringPrefixEnd returns the least byte string above every string that
// starts with prefix, and false when there is none (prefix is empty or
// all 0xFF).
func recurringPrefixEnd(prefix string) (string, bool) {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return string(end[:i+1]), true
		}
	}
	return "", false
}

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way (one that is not id's and lasts past
// now), until until: with RecurringSQL.RunBegin in one statement,
// otherwise in one transaction that locks the schedule's run, or inserts
// it when there is none (of two racing inserts, the second finds the
// first's run).
func (r *Recurrings) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	var began bool
	var err error
	if r.sql.RunBegin != "" {
		var n int64
		n, err = r.db.Exec(ctx, r.sql.RunBegin, r.d.T(name), r.d.T(id), r.d.Times.Arg(until), r.d.Times.Arg(now))
		began = n > 0
	} else {
		err = r.inTx(ctx, func(tx Tx) error {
			var err error
			began, err = r.beginRun(ctx, tx, name, id, now, until)
			return err
		})
	}
	if err != nil {
		return false, r.d.Errorf("begin the run of %s: %w", name, err)
	}
	return began, nil
}

func (r *Recurrings) beginRun(ctx context.Context, tx Tx, name, id string, now, until time.Time) (bool, error) {
	var runID string
	var runUntil any
	err := tx.QueryRow(ctx, r.sql.RunLock, r.d.T(name)).Scan(&runID, &runUntil)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.Exec(ctx, r.sql.RunInsert, r.d.T(name), r.d.T(id), r.d.Times.Arg(until))
		if r.d.Unique(err) {
			return false, nil // another occurrence began first
		}
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	held, err := r.d.Times.Scan(runUntil)
	if err != nil || (runID != id && held.After(now)) {
		return false, err
	}
	_, err = tx.Exec(ctx, r.sql.RunTake, r.d.T(id), r.d.Times.Arg(until), r.d.T(name))
	return err == nil, err
}

// EndRecurringRun ends the run id of the schedule name.
func (r *Recurrings) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := r.db.Exec(ctx, r.sql.RunEnd, r.d.T(name), r.d.T(id)); err != nil {
		return r.d.Errorf("end the run of %s: %w", name, err)
	}
	return nil
}

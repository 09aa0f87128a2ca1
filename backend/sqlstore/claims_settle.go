package sqlstore

import (
	"context"
	"sync"
	"time"

	"github.com/postbus/bus/backend"
)

// Settler settles claimed rows: the DeleteOutgoing, ReleaseOutgoing and
// RecordOutgoingFailures of a scheduled store, whose rows claims lock
// (LockedClaims.Settler) or lease (NewLeases). A store embeds it to have
// those methods.
type Settler struct {
	d      *Dialect
	ops    SettleOps
	settle func(ctx context.Context, kind settleKind, claims []backend.Claim, failures []backend.OutgoingFailure) (int, error)
}

// SettleOps names the settling operations in the store's errors
// ("<dialect>: <op>: …").
type SettleOps struct {
	Delete, Release, Fail string
}

// settleKind says what a settlement does to its rows.
type settleKind int

const (
	settleDelete settleKind = iota
	settleRelease
	settleFail
)

// DeleteOutgoing removes the claimed rows that their claims still hold
// and returns how many it removed. A row another claim took, cancelled,
// stored again or unknown is left alone, as are the rows of a claim whose
// lease lapsed. On a store that locks its rows the deletes run in each
// claim's transaction, and the settlement that leaves a claim with no row
// to settle commits it, in the same round trip where the client can; until
// then nothing is committed. When that commit fails (the connection was
// lost), the error is returned and the rows, not removed, are claimable
// again: they are delivered again under the same message IDs.
func (s *Settler) DeleteOutgoing(ctx context.Context, claims []backend.Claim) (int, error) {
	return s.run(ctx, s.ops.Delete, settleDelete, claims, nil)
}

// ReleaseOutgoing gives back the claimed rows that their claims still
// hold, counting no failure, and returns how many it released. Each row
// is claimable again when it was before its claim (its due time, or the
// end of a failure's backoff): on a store that locks its rows, once its
// claim's transaction ends, which the settlement of the claim's last row
// does; the rows are not written.
func (s *Settler) ReleaseOutgoing(ctx context.Context, claims []backend.Claim) (int, error) {
	return s.run(ctx, s.ops.Release, settleRelease, claims, nil)
}

// RecordOutgoingFailures counts a failure on each row its claim still
// holds, keeps the error text, and makes the row claimable again
// RetryAfter after the store's clock at the statement (at RetryAt when
// RetryAfter is not positive), in the claim's transaction on a store that
// locks its rows. It returns how many rows it changed.
func (s *Settler) RecordOutgoingFailures(ctx context.Context, failures []backend.OutgoingFailure) (int, error) {
	claims := make([]backend.Claim, len(failures))
	for i, f := range failures {
		claims[i] = backend.Claim{ID: f.ID, Token: f.Token}
	}
	return s.run(ctx, s.ops.Fail, settleFail, claims, failures)
}

func (s *Settler) run(ctx context.Context, op string, kind settleKind, claims []backend.Claim, failures []backend.OutgoingFailure) (int, error) {
	n, err := s.settle(ctx, kind, claims, failures)
	if err != nil {
		return n, s.d.Errorf("%s: %w", op, err)
	}
	return n, nil
}

// byToken groups claims by token, in the order the tokens first come,
// leaving out the empty token (never a claim's): the indexes of each
// token's claims.
func byToken(claims []backend.Claim) ([]string, map[string][]int) {
	var order []string
	groups := map[string][]int{}
	for i, c := range claims {
		if c.Token == "" {
			continue
		}
		if _, ok := groups[c.Token]; !ok {
			order = append(order, c.Token)
		}
		groups[c.Token] = append(groups[c.Token], i)
	}
	return order, groups
}

// Settler returns the settling methods of the store of r, whose errors
// name ops.
func (r *LockedClaims) Settler(ops SettleOps) *Settler {
	return &Settler{d: r.d, ops: ops, settle: r.settle}
}

// settle settles claims, grouped by token, each group in its claim's
// transaction, the groups at once (failures, for settleFail, parallels
// claims). It returns the rows settled and the first error.
func (r *LockedClaims) settle(ctx context.Context, kind settleKind, claims []backend.Claim, failures []backend.OutgoingFailure) (int, error) {
	if len(claims) == 0 {
		return 0, ctx.Err()
	}
	order, groups := byToken(claims)
	one := func(token string) (int, error) {
		c := r.Get(token)
		if c == nil {
			return 0, nil // unknown, settled or lapsed: holds no row
		}
		return c.settle(ctx, kind, claims, failures, groups[token])
	}
	if len(order) == 1 {
		return one(order[0])
	}
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
	)
	for _, token := range order {
		wg.Go(func() {
			n, err := one(token)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if err != nil && first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	return total, first
}

// settle runs one settlement of the claims idx names (of claims, and of
// failures for settleFail) in the claim's transaction: the statements for
// the rows the claim still holds (none for a release), then the end of the
// transaction, COMMIT or ROLLBACK when nothing was written, when these
// were its last rows. It returns how many rows it settled. A claim whose
// transaction the server has ended for idling (its lease lapsed) settles
// nothing and is no error.
func (c *OpenClaim) settle(ctx context.Context, kind settleKind, claims []backend.Claim, failures []backend.OutgoingFailure, idx []int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return 0, nil
	}
	keep := make([]int, 0, len(idx))
	seen := make(map[string]struct{}, len(idx))
	for _, i := range idx {
		id := claims[i].ID
		if _, ok := c.pending[id]; !ok {
			continue
		}
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		keep = append(keep, i)
	}
	if len(keep) == 0 {
		return 0, nil
	}
	last := len(keep) == len(c.pending)
	write := kind != settleRelease
	end := EndNone
	if last {
		end = EndRollback
		if c.wrote || write {
			end = EndCommit
		}
	}
	if !write && !last {
		c.forget(seen)
		return len(keep), nil
	}
	var stmts []Stmt
	switch kind {
	case settleDelete:
		ids := make([]string, len(keep))
		for j, i := range keep {
			ids[j] = claims[i].ID
		}
		stmts = c.reg.sql.Delete(ids)
	case settleFail:
		fs := make([]backend.OutgoingFailure, len(keep))
		for j, i := range keep {
			fs[j] = failures[i]
		}
		stmts = c.reg.sql.Fail(fs)
	}
	n, err := c.conn.Settle(ctx, stmts, end)
	if err != nil {
		lapsed := c.conn.Lapsed(err, time.Since(c.used), c.idle)
		c.finish(EndRollback)
		if lapsed {
			c.reg.cfg.Log.Warn(c.reg.d.Name+": the server ended a claim idle past its lease; its rows are claimable again",
				"unsettled", len(c.pending), "idle", time.Since(c.used).Round(time.Millisecond))
			return 0, nil
		}
		return 0, err
	}
	if !write {
		n = int64(len(keep))
	}
	c.used = time.Now()
	c.wrote = c.wrote || write
	c.forget(seen)
	if last {
		c.finish(EndNone)
	}
	return int(n), nil
}

// forget drops the settled ids from the claim's rows and the registry's.
// The caller holds c.mu.
func (c *OpenClaim) forget(ids map[string]struct{}) {
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	for id := range ids {
		delete(c.pending, id)
		delete(c.reg.ids, id)
	}
}

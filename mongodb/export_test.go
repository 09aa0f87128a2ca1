package mongodb

import (
	"context"
	"time"
)

// CrashAfterTickets does the first half of a claim round and stops, as a
// claimer that crashes after winning its tickets and before leasing the
// documents. It returns how many tickets it won.
func (p *Persistence) CrashAfterTickets(ctx context.Context, transport string, limit int, lease time.Duration) (int, error) {
	now, err := p.serverTime(ctx)
	if err != nil {
		return 0, err
	}
	cands, err := p.findClaimable(ctx, transport, now, limit, nil)
	if err != nil {
		return 0, err
	}
	won, _, _, err := p.takeTickets(ctx, cands, now, ceilMillis(now.Add(lease)))
	return len(won), err
}

// SetAfterFind makes every claim round call f between finding its
// candidates and claiming them.
func SetAfterFind(p *Persistence, f func(ctx context.Context)) { p.afterFind = f }

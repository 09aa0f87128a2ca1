package mongodb

import (
	"context"
	"time"
)

// CrashAfterTickets does the first half of a claim and stops, as a claimer
// that crashes after winning its tickets and before leasing the documents.
// It returns how many tickets it won.
func (p *Persistence) CrashAfterTickets(ctx context.Context, limit int, lease time.Duration) (int, error) {
	now, err := p.serverTime(ctx)
	if err != nil {
		return 0, err
	}
	cands, err := p.findClaimable(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	won, err := p.takeTickets(ctx, cands, now, ceilMillis(now.Add(lease)))
	return len(won), err
}

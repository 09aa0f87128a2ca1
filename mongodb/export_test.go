package mongodb

import (
	"context"
	"errors"
	"time"

	"github.com/postbus/bus"
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

// CommitAdvanceOnly writes adv's step of the record, its rows pending,
// and stops, as a process that crashes right after the commit point of
// AdvanceRecurring. The write is dated pendingGrace ago, so the next
// reader finishes it at once.
func CommitAdvanceOnly(ctx context.Context, p *Persistence, adv bus.RecurringAdvance) error {
	cur, ok, err := p.latestRecurring(ctx, adv.Name)
	if err != nil || !ok {
		return errors.Join(err, errors.New("no record"))
	}
	d := cur.next()
	d.Last = toNanos(adv.Last)
	for _, t := range adv.Ticks {
		d.Ticks = append(d.Ticks, toNanos(t))
	}
	d.Pending = &pendingAdvance{Cancel: adv.Cancel}
	for _, m := range adv.Store {
		d.Pending.Store = append(d.Pending.Store, pendingRow{ID: m.ID, Kind: int32(m.Kind), Type: m.Type, Envelope: m.Envelope,
			DueAt: m.DueAt.UnixNano(), Transport: m.Transport})
	}
	d.ID = recurringDocID(d.Name, d.Seq)
	d.WrittenAt = time.Now().Add(-pendingGrace)
	_, err = p.recurring.InsertOne(ctx, &d)
	return err
}

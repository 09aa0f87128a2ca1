package bus

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"time"
)

var _ ScheduledBrowser = (*MemoryPersistence)(nil)

// The memory store browses by sorting the selected rows: O(n log n) per
// call, fine for the backlogs a process keeps in memory.

// ListScheduled returns the rows q selects, earliest due first, then by ID.
func (p *MemoryPersistence) ListScheduled(ctx context.Context, q ScheduledQuery) ([]OutgoingMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	var after int64
	if !q.AfterDue.IsZero() {
		after = q.AfterDue.UnixNano()
	}
	p.mu.Lock()
	sel := make([]*memRow, 0, 64)
	for _, r := range p.rows {
		switch {
		case q.Type != "" && r.typ != q.Type,
			!q.DueAfter.IsZero() && r.due < q.DueAfter.UnixNano(),
			!q.DueBefore.IsZero() && r.due >= q.DueBefore.UnixNano(),
			!q.AfterDue.IsZero() && (r.due < after || r.due == after && r.id <= q.AfterID):
			continue
		}
		sel = append(sel, r)
	}
	slices.SortFunc(sel, func(a, b *memRow) int { return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.id, b.id)) })
	sel = sel[:min(len(sel), limit)]
	out := make([]OutgoingMessage, len(sel))
	for i, r := range sel {
		out[i] = r.outgoing()
	}
	p.mu.Unlock()
	return out, nil
}

// GetScheduled returns the row with the ID.
func (p *MemoryPersistence) GetScheduled(ctx context.Context, id string) (OutgoingMessage, bool, error) {
	if err := ctx.Err(); err != nil {
		return OutgoingMessage{}, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rows[id]
	if r == nil {
		return OutgoingMessage{}, false, nil
	}
	return r.outgoing(), true, nil
}

// StatsScheduled counts the rows exactly, and the overdue ones at now.
func (p *MemoryPersistence) StatsScheduled(ctx context.Context, now time.Time) (ScheduledStats, error) {
	if err := ctx.Err(); err != nil {
		return ScheduledStats{}, err
	}
	n := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := ScheduledStats{Count: int64(len(p.rows))}
	var oldest *memRow
	for _, r := range p.rows {
		if r.available > n {
			continue
		}
		st.Overdue++
		if oldest == nil || r.available < oldest.available || r.available == oldest.available && r.id < oldest.id {
			oldest = r
		}
	}
	st.Overdue = min(st.Overdue, OverdueCap)
	if oldest != nil {
		st.OldestOverdue = time.Unix(0, oldest.due)
	}
	return st, nil
}

// DueHistogram counts the rows due in each bucket.
func (p *MemoryPersistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := CheckHistogram(width, n); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]int64, n)
	start, w := from.UnixNano(), int64(width)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rows {
		if r.due < start {
			continue
		}
		if b := (r.due - start) / w; b < int64(n) {
			out[b]++
		}
	}
	return out, nil
}

// SendNow makes a row that is not leased due at the clock's now.
func (p *MemoryPersistence) SendNow(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p.mu.Lock()
	r := p.rows[id]
	now := p.now
	if p.clock != nil {
		now = max(now, p.clock.Now().UnixNano())
	} else {
		now = max(now, time.Now().UnixNano())
	}
	if r == nil || r.token != "" && r.lease > now {
		p.mu.Unlock()
		return false, nil
	}
	r.due, r.available, r.lease, r.token = now, now, 0, ""
	heap.Fix(p.heapOf(r.transport), int(r.index))
	watchers := p.watcherList()
	p.mu.Unlock()
	for _, w := range watchers {
		w(time.Unix(0, now))
	}
	return true, nil
}

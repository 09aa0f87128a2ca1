package bus

import (
	"cmp"
	"context"
	"slices"
	"sync"
)

var _ FailedStore = (*MemoryPersistence)(nil)

// memoryFailed is the failed-message store of a MemoryPersistence: a map by
// message ID, sorted per query (O(n log n)), fine for a process's memory.
type memoryFailed struct {
	mu   sync.Mutex
	msgs map[string]*FailedMessage
}

// StoreFailed inserts or updates the messages (see FailedStore).
func (p *MemoryPersistence) StoreFailed(ctx context.Context, msgs []FailedMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f := &p.failed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msgs == nil {
		f.msgs = map[string]*FailedMessage{}
	}
	for _, m := range msgs {
		old := f.msgs[m.ID]
		if old == nil {
			c := m
			c.Failures = max(c.Failures, 1)
			c.FirstFailed, c.LastFailed = m.FirstFailed.UTC(), m.LastFailed.UTC()
			if c.FirstFailed.IsZero() {
				c.FirstFailed = c.LastFailed
			}
			f.msgs[m.ID] = &c
			continue
		}
		mergeFailure(old, m)
	}
	return nil
}

// mergeFailure applies a new failure m of a stored message old.
func mergeFailure(old *FailedMessage, m FailedMessage) {
	if m.LastFailed.Equal(old.LastFailed) {
		return // the same failure delivered twice
	}
	old.Failures++
	if first := cmp.Or(m.FirstFailed, m.LastFailed); first.Before(old.FirstFailed) {
		old.FirstFailed = first.UTC()
	}
	if m.LastFailed.After(old.LastFailed) {
		failures, first := old.Failures, old.FirstFailed
		*old = m
		old.Failures, old.FirstFailed, old.LastFailed = failures, first, m.LastFailed.UTC()
	}
}

// matchFailed reports whether m is selected by q, paging aside.
func matchFailed(m *FailedMessage, q FailedQuery) bool {
	return (q.Group == "" || m.Group == q.Group) && (q.Type == "" || m.Type == q.Type) &&
		(q.Endpoint == "" || m.Endpoint == q.Endpoint) && (q.Search == "" || m.ID == q.Search)
}

// ListFailed returns the messages q selects, most recent failure first.
func (p *MemoryPersistence) ListFailed(ctx context.Context, q FailedQuery) ([]FailedMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := cmp.Or(max(q.Limit, 0), 100)
	f := &p.failed
	f.mu.Lock()
	defer f.mu.Unlock()
	var sel []*FailedMessage
	for _, m := range f.msgs {
		if !matchFailed(m, q) {
			continue
		}
		if !q.BeforeFailed.IsZero() {
			if c := m.LastFailed.Compare(q.BeforeFailed); c > 0 || c == 0 && m.ID >= q.BeforeID {
				continue
			}
		}
		sel = append(sel, m)
	}
	slices.SortFunc(sel, func(a, b *FailedMessage) int {
		return cmp.Or(b.LastFailed.Compare(a.LastFailed), cmp.Compare(b.ID, a.ID))
	})
	sel = sel[:min(len(sel), limit)]
	out := make([]FailedMessage, len(sel))
	for i, m := range sel {
		out[i] = *m
	}
	return out, nil
}

// CountFailed counts the messages q selects.
func (p *MemoryPersistence) CountFailed(ctx context.Context, q FailedQuery) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f := &p.failed
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, m := range f.msgs {
		if matchFailed(m, q) {
			n++
		}
	}
	return n, nil
}

// GetFailed returns the message with the ID.
func (p *MemoryPersistence) GetFailed(ctx context.Context, id string) (FailedMessage, bool, error) {
	if err := ctx.Err(); err != nil {
		return FailedMessage{}, false, err
	}
	f := &p.failed
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.msgs[id]; m != nil {
		return *m, true, nil
	}
	return FailedMessage{}, false, nil
}

// FailedGroups returns up to limit groups, largest first.
func (p *MemoryPersistence) FailedGroups(ctx context.Context, limit int) ([]FailedGroup, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f := &p.failed
	f.mu.Lock()
	groups := map[string]*FailedGroup{}
	for _, m := range f.msgs {
		g := groups[m.Group]
		if g == nil {
			g = &FailedGroup{Group: m.Group, Type: m.Type, Endpoint: m.Endpoint, Reason: NormalizeReason(m.Reason),
				FirstFailed: m.FirstFailed, LastFailed: m.LastFailed}
			groups[m.Group] = g
		}
		g.Count++
		if m.FirstFailed.Before(g.FirstFailed) {
			g.FirstFailed = m.FirstFailed
		}
		if m.LastFailed.After(g.LastFailed) {
			g.LastFailed = m.LastFailed
		}
	}
	f.mu.Unlock()
	return topGroups(groups, limit), nil
}

// topGroups sorts groups largest first, then most recent, then by group,
// and keeps limit of them (100 when limit is not positive).
func topGroups(groups map[string]*FailedGroup, limit int) []FailedGroup {
	out := make([]FailedGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b FailedGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastFailed.Compare(a.LastFailed), cmp.Compare(a.Group, b.Group))
	})
	return out[:min(len(out), cmp.Or(max(limit, 0), 100))]
}

// DeleteFailed deletes the messages with the IDs.
func (p *MemoryPersistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f := &p.failed
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := f.msgs[id]; ok {
			delete(f.msgs, id)
			n++
		}
	}
	return n, nil
}

package bus

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

var _ RecurringStore = (*MemoryPersistence)(nil)

// memoryRecurring holds the schedule records of a MemoryPersistence. Its
// lock is taken before the rows' lock, never while holding it, so an
// advance is one step for every other advance: the record check, the rows
// stored and cancelled, and the record update.
type memoryRecurring struct {
	mu      sync.Mutex
	records map[string]RecurringRecord
}

func cloneRecord(r RecurringRecord) RecurringRecord {
	r.Ticks = slices.Clone(r.Ticks)
	return r
}

// DeclareRecurring inserts or replaces the record (see RecurringStore).
func (p *MemoryPersistence) DeclareRecurring(ctx context.Context, rec RecurringRecord) (RecurringRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return RecurringRecord{}, false, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[string]RecurringRecord{}
	}
	cur, ok := m.records[rec.Name]
	switch {
	case !ok:
		cur = RecurringRecord{Name: rec.Name, Fingerprint: rec.Fingerprint, Schedule: rec.Schedule, Generation: 1}
	case cur.Fingerprint == rec.Fingerprint:
		return cloneRecord(cur), false, nil
	default:
		cur.Fingerprint, cur.Schedule = rec.Fingerprint, rec.Schedule
		cur.Generation++
	}
	m.records[rec.Name] = cur
	return cloneRecord(cur), true, nil
}

// LoadRecurring returns the record name.
func (p *MemoryPersistence) LoadRecurring(ctx context.Context, name string) (RecurringRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return RecurringRecord{}, false, err
	}
	p.recur.mu.Lock()
	defer p.recur.mu.Unlock()
	r, ok := p.recur.records[name]
	if !ok || r.Fingerprint == "" { // absent, or a deleted record's tombstone
		return RecurringRecord{}, false, nil
	}
	return cloneRecord(r), true, nil
}

// ListRecurring returns every record, by name.
func (p *MemoryPersistence) ListRecurring(ctx context.Context) ([]RecurringRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.recur.mu.Lock()
	defer p.recur.mu.Unlock()
	out := make([]RecurringRecord, 0, len(p.recur.records))
	for _, name := range slices.Sorted(maps.Keys(p.recur.records)) {
		if r := p.recur.records[name]; r.Fingerprint != "" {
			out = append(out, cloneRecord(r))
		}
	}
	return out, nil
}

// AdvanceRecurring applies adv if the record still matches it.
func (p *MemoryPersistence) AdvanceRecurring(ctx context.Context, adv RecurringAdvance) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.records[adv.Name]
	if !ok || cur.Generation != adv.Generation || cur.Fingerprint != adv.Fingerprint || cur.Paused != adv.Paused ||
		!cur.Last.Equal(adv.From) {
		return false, nil
	}
	for _, id := range adv.Cancel {
		if _, err := p.CancelOutgoing(ctx, id); err != nil {
			return false, err
		}
	}
	if len(adv.Store) > 0 {
		if err := p.StoreOutgoing(ctx, adv.Store); err != nil {
			return false, err
		}
	}
	cur.Last, cur.Ticks = adv.Last, slices.Clone(adv.Ticks)
	if adv.Alive.After(cur.Alive) {
		cur.Alive = adv.Alive
	}
	m.records[adv.Name] = cur
	return true, nil
}

// SetRecurringPaused pauses or resumes the record name.
func (p *MemoryPersistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.records[name]
	if !ok || cur.Fingerprint == "" {
		return false, nil
	}
	cur.Paused = paused
	if !paused && cur.Last.Before(at) {
		cur.Last = at
	}
	m.records[name] = cur
	return true, nil
}

// DeleteRecurring removes the record name, leaving its generation, and
// cancels the rows named.
func (p *MemoryPersistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.records[name]
	if !ok || cur.Fingerprint == "" {
		return false, nil
	}
	for _, id := range cancel {
		if _, err := p.CancelOutgoing(ctx, id); err != nil {
			return false, err
		}
	}
	m.records[name] = RecurringRecord{Name: name, Generation: cur.Generation} // the tombstone keeps the generation
	return true, nil
}

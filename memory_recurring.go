package bus

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

var _ RecurringRuntimeStore = (*MemoryPersistence)(nil)

// memoryRecurring holds the schedule records of a MemoryPersistence. Its
// lock is taken before the rows' lock, never while holding it, so an
// advance is one step for every other advance: the record check, the rows
// stored and cancelled, and the record update.
type memoryRecurring struct {
	mu      sync.Mutex
	records map[string]RecurringRecord
	changed chan struct{}        // closed and replaced when a runtime record may fall due sooner
	runs    map[string]memoryRun // RecurringRunGuard: the run under way per schedule
}

// notify wakes the runtime loops of the buses on the store; under m.mu.
func (m *memoryRecurring) notify() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// recurringWatch returns the earliest Due of the runtime records (zero
// when none is due ever), whether there are any, and a channel closed
// when that may change: the buses in this process are the only ones on
// the store, so their runtime loops need no timer while no runtime
// schedule is stored.
func (p *MemoryPersistence) recurringWatch() (next time.Time, any bool, changed <-chan struct{}) {
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	for _, r := range m.records {
		any = any || r.Spec != nil
		if r.Spec != nil && !r.Due.IsZero() && (next.IsZero() || r.Due.Before(next)) {
			next = r.Due
		}
	}
	return next, any, m.changed
}

func cloneRecord(r RecurringRecord) RecurringRecord {
	r.Ticks = slices.Clone(r.Ticks)
	r.Spec = slices.Clone(r.Spec)
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
		cur = RecurringRecord{Name: rec.Name, Fingerprint: rec.Fingerprint, Schedule: rec.Schedule, Generation: 1,
			Spec: slices.Clone(rec.Spec), Due: rec.Due}
	case cur.Fingerprint == rec.Fingerprint:
		return cloneRecord(cur), false, nil
	default:
		cur.Fingerprint, cur.Schedule = rec.Fingerprint, rec.Schedule
		cur.Spec, cur.Due = slices.Clone(rec.Spec), rec.Due
		cur.Generation++
	}
	m.records[rec.Name] = cur
	m.notify()
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
	if cur.Spec != nil && !adv.Due.IsZero() && (cur.Due.IsZero() || adv.Due.Before(cur.Due)) {
		m.notify() // due sooner than the runtime loops may wait
	}
	cur.Due, cur.Runs, cur.Skipped = adv.Due, adv.Runs, adv.Skipped
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
	cur.Paused, cur.Due = paused, at
	if !paused && cur.Last.Before(at) {
		cur.Last = at
	}
	m.records[name] = cur
	m.notify()
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

// ClaimDueRecurring returns the runtime records due at now, earliest
// first, and moves their Due to now plus lease. It scans every record:
// the in-memory store is for tests and single processes.
func (p *MemoryPersistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]RecurringRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []RecurringRecord
	for _, r := range m.records {
		if r.Spec != nil && !r.Due.IsZero() && !r.Due.After(now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b RecurringRecord) int {
		if c := a.Due.Compare(b.Due); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	due = due[:min(len(due), limit)]
	out := make([]RecurringRecord, len(due))
	for i, r := range due {
		out[i] = cloneRecord(r)
		r.Due = now.Add(lease)
		m.records[r.Name] = r
	}
	return out, nil
}

// ListRecurringPage returns up to limit records named with prefix after
// after, by name.
func (p *MemoryPersistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]RecurringRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.recur.mu.Lock()
	defer p.recur.mu.Unlock()
	var out []RecurringRecord
	for _, name := range slices.Sorted(maps.Keys(p.recur.records)) {
		r := p.recur.records[name]
		if r.Fingerprint == "" || name <= after || !strings.HasPrefix(name, prefix) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, cloneRecord(r))
	}
	return out, nil
}

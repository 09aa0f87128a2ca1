package bus

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

var (
	_ Persistence    = (*MemoryPersistence)(nil)
	_ ScheduledStore = (*MemoryPersistence)(nil)
	_ DueNotifier    = (*MemoryPersistence)(nil)
)

// MemoryPersistence keeps scheduled messages in process memory: the default
// when Config.Persistence is nil. It is not durable: everything is lost when
// the process exits. Buses given the same value share its rows.
//
// Rows sit in a min-heap ordered by the time they next become claimable, with
// a map from ID to heap slot: store, claim (per row), delete and cancel cost
// O(log n); the next due time is O(1).
type MemoryPersistence struct {
	mu       sync.Mutex
	rows     map[string]*memRow
	heap     rowHeap
	watchers map[int]func(time.Time)
	nextWID  int
}

type memRow struct {
	id        string
	env       []byte
	due       int64 // Unix nanoseconds
	available int64 // due, pushed forward by leases and failure backoff
	lease     int64
	failures  int32
	kind      Kind
	index     int32 // heap slot
	lastError string
}

// NewMemoryPersistence returns an empty in-memory persistence.
func NewMemoryPersistence() *MemoryPersistence {
	return &MemoryPersistence{rows: map[string]*memRow{}, watchers: map[int]func(time.Time){}}
}

// Durable reports false: rows are lost on restart.
func (p *MemoryPersistence) Durable() bool { return false }

// StoreOutgoing inserts rows, ignoring IDs already stored.
func (p *MemoryPersistence) StoreOutgoing(ctx context.Context, msgs []OutgoingMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var earliest int64
	p.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		if _, ok := p.rows[m.ID]; ok {
			continue
		}
		r := &memRow{id: m.ID, env: m.Envelope, due: m.DueAt.UnixNano(), kind: m.Kind}
		r.available = r.due
		p.rows[m.ID] = r
		heap.Push(&p.heap, r)
		if earliest == 0 || r.due < earliest {
			earliest = r.due
		}
	}
	watchers := p.watcherList()
	p.mu.Unlock()
	if earliest != 0 {
		due := time.Unix(0, earliest)
		for _, w := range watchers {
			w(due)
		}
	}
	return nil
}

// ClaimDueOutgoing leases up to limit rows claimable at now, earliest first.
func (p *MemoryPersistence) ClaimDueOutgoing(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]OutgoingMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := now.UnixNano()
	until := now.Add(lease).UnixNano()
	var out []OutgoingMessage
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(out) < limit && len(p.heap) > 0 && p.heap[0].available <= n {
		r := p.heap[0]
		r.available, r.lease = until, until
		heap.Fix(&p.heap, 0)
		out = append(out, r.outgoing())
	}
	return out, nil
}

// DeleteOutgoing removes rows.
func (p *MemoryPersistence) DeleteOutgoing(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		p.removeLocked(id)
	}
	return nil
}

// ReleaseOutgoing makes claimed rows claimable again at once.
func (p *MemoryPersistence) ReleaseOutgoing(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if r := p.rows[id]; r != nil && r.lease != 0 {
			r.available, r.lease = r.due, 0
			heap.Fix(&p.heap, int(r.index))
		}
	}
	return nil
}

// RecordOutgoingFailures counts failures and defers the rows to RetryAt.
func (p *MemoryPersistence) RecordOutgoingFailures(ctx context.Context, failures []OutgoingFailure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range failures {
		if r := p.rows[f.ID]; r != nil {
			r.failures++
			r.lastError = f.Error
			r.available, r.lease = f.RetryAt.UnixNano(), 0
			heap.Fix(&p.heap, int(r.index))
		}
	}
	return nil
}

// NextDueOutgoing returns when the earliest row becomes claimable.
func (p *MemoryPersistence) NextDueOutgoing(ctx context.Context) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.heap) == 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(0, p.heap[0].available), true, nil
}

// CancelOutgoing removes a row and reports whether it was there.
func (p *MemoryPersistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removeLocked(id), nil
}

// WatchDue calls wake for every row stored through this value until ctx ends.
func (p *MemoryPersistence) WatchDue(ctx context.Context, wake func(time.Time)) error {
	p.mu.Lock()
	id := p.nextWID
	p.nextWID++
	p.watchers[id] = wake
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	delete(p.watchers, id)
	p.mu.Unlock()
	return nil
}

// Len returns the number of stored rows.
func (p *MemoryPersistence) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.rows)
}

func (p *MemoryPersistence) watcherList() []func(time.Time) {
	if len(p.watchers) == 0 {
		return nil
	}
	ws := make([]func(time.Time), 0, len(p.watchers))
	for _, w := range p.watchers {
		ws = append(ws, w)
	}
	return ws
}

func (p *MemoryPersistence) removeLocked(id string) bool {
	r := p.rows[id]
	if r == nil {
		return false
	}
	heap.Remove(&p.heap, int(r.index))
	delete(p.rows, id)
	return true
}

func (r *memRow) outgoing() OutgoingMessage {
	return OutgoingMessage{
		ID: r.id, Kind: r.kind, Envelope: r.env,
		DueAt: time.Unix(0, r.due), LeaseUntil: time.Unix(0, r.lease),
		Failures: int(r.failures), LastError: r.lastError,
	}
}

// rowHeap orders rows by the time they next become claimable, then by ID
// (UUIDv7 IDs are time-ordered), so equal times come out in send order.
type rowHeap []*memRow

func (h rowHeap) Len() int { return len(h) }
func (h rowHeap) Less(i, j int) bool {
	if h[i].available != h[j].available {
		return h[i].available < h[j].available
	}
	return h[i].id < h[j].id
}
func (h rowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = int32(i), int32(j)
}
func (h *rowHeap) Push(x any) {
	r := x.(*memRow)
	r.index = int32(len(*h))
	*h = append(*h, r)
}
func (h *rowHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

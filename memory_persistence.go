package bus

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

var (
	_ Persistence    = (*MemoryPersistence)(nil)
	_ ScheduledStore = (*MemoryPersistence)(nil)
	_ DueNotifier    = (*MemoryPersistence)(nil)
	_ AheadClaimer   = (*MemoryPersistence)(nil)
	_ Pinger         = (*MemoryPersistence)(nil)
)

// MemoryPersistence keeps scheduled messages in process memory: the default
// when Config.Persistence is nil. It is not durable: everything is lost when
// the process exits. Buses given the same value share its rows.
//
// Rows sit in one min-heap per transport identity, ordered by the time they
// next become claimable, with a map from ID to row: store, claim (per row),
// delete and cancel cost O(log n); the next due time is O(1). It has no clock
// of its own: times come from the bus's Config.Clock (DueAt, RetryAt and the
// claim's now). A lease counts as running until both a claim's now and the
// clock of the first bus given this value (the system clock by default)
// have passed it.
//
// It also implements the operations capabilities: ScheduledBrowser over its
// rows, and FailedStore in a map of its own (so one value serves a bus and
// the error-queue ingester, as in tests and tools). Both sort what they
// select on every call, which suits the sizes kept in memory.
type MemoryPersistence struct {
	mu       sync.Mutex
	rows     map[string]*memRow
	heaps    map[string]*rowHeap // by transport identity
	now      int64               // the latest now a claim was given
	clock    Clock               // tells when a lease lapsed, for CancelOutgoing
	claims   uint64              // lease tokens
	watchers map[int]func(time.Time)
	nextWID  int
	sagas    memorySagas
	failed   memoryFailed
	recur    memoryRecurring
}

type memRow struct {
	id        string
	env       []byte
	transport string
	due       int64 // Unix nanoseconds
	available int64 // due, pushed forward by leases and failure backoff
	prior     int64 // available before the running lease: where a release puts it back
	lease     int64
	token     string // "" when not leased
	failures  int32
	kind      Kind
	typ       string
	index     int32 // heap slot
	lastError string
}

// NewMemoryPersistence returns an empty in-memory persistence.
func NewMemoryPersistence() *MemoryPersistence {
	return &MemoryPersistence{rows: map[string]*memRow{}, heaps: map[string]*rowHeap{}, watchers: map[int]func(time.Time){}}
}

// adoptClock makes c the clock leases lapse on, unless one was adopted.
func (p *MemoryPersistence) adoptClock(c Clock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clock == nil {
		p.clock = c
	}
}

// Durable reports false: rows are lost on restart.
func (p *MemoryPersistence) Durable() bool { return false }

// Ping returns ctx's error, if any: the rows are in this process.
func (p *MemoryPersistence) Ping(ctx context.Context) error { return ctx.Err() }

// StoreOutgoing inserts rows under one lock, ignoring IDs already stored.
// A row with an empty ID or no envelope fails the call (ErrInvalidMessage)
// before anything is stored.
func (p *MemoryPersistence) StoreOutgoing(ctx context.Context, msgs []OutgoingMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range msgs {
		if msgs[i].ID == "" || msgs[i].Envelope == nil {
			return fmt.Errorf("bus: memory persistence: store row %d (%q): %w: empty ID or no envelope", i, msgs[i].ID, ErrInvalidMessage)
		}
	}
	var earliest int64
	p.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		if _, ok := p.rows[m.ID]; ok {
			continue
		}
		r := &memRow{id: m.ID, env: m.Envelope, transport: m.Transport, due: m.DueAt.UnixNano(), kind: m.Kind, typ: m.Type}
		r.available = r.due
		p.rows[m.ID] = r
		heap.Push(p.heapOf(r.transport), r)
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

// ClaimDueOutgoing leases up to limit rows of transport claimable at now,
// earliest first, under a new token.
func (p *MemoryPersistence) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]OutgoingMessage, error) {
	c, err := p.ClaimOutgoingAhead(ctx, transport, now, 0, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead leases up to limit rows of transport claimable by
// now+ahead, earliest first, until now+ahead+lease, under a new token. The
// store has no clock: the claim's Now is the argument.
func (p *MemoryPersistence) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (AheadClaim, error) {
	if err := ctx.Err(); err != nil {
		return AheadClaim{}, err
	}
	by := now.Add(max(ahead, 0)).UnixNano()
	until := now.Add(max(ahead, 0) + lease).UnixNano()
	var out []OutgoingMessage
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = max(p.now, now.UnixNano())
	p.claims++
	token := strconv.FormatUint(p.claims, 36)
	for _, h := range p.heapsFor(transport) {
		for len(out) < limit && len(*h) > 0 && (*h)[0].available <= by {
			r := (*h)[0]
			was := r.available
			r.prior, r.available, r.lease, r.token = was, until, until, token
			heap.Fix(h, 0)
			m := r.outgoing()
			m.AvailableAt = time.Unix(0, was)
			out = append(out, m)
		}
	}
	return AheadClaim{Rows: out, Now: now}, nil
}

// DeleteOutgoing removes the rows their tokens still hold.
func (p *MemoryPersistence) DeleteOutgoing(ctx context.Context, claims []Claim) (int, error) {
	return p.settle(ctx, claims, func(r *memRow) { p.removeLocked(r) })
}

// ReleaseOutgoing ends the leases of the rows their tokens still hold,
// making each claimable again when it was before the claim: its due time,
// or the end of a failure's backoff.
func (p *MemoryPersistence) ReleaseOutgoing(ctx context.Context, claims []Claim) (int, error) {
	return p.settle(ctx, claims, func(r *memRow) {
		r.available, r.lease, r.token = r.prior, 0, ""
		heap.Fix(p.heapOf(r.transport), int(r.index))
	})
}

// RecordOutgoingFailures counts failures on the rows their tokens still
// hold and defers them to RetryAt.
func (p *MemoryPersistence) RecordOutgoingFailures(ctx context.Context, failures []OutgoingFailure) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range failures {
		if r := p.held(Claim{ID: f.ID, Token: f.Token}); r != nil {
			r.failures++
			r.lastError = f.Error
			r.available, r.lease, r.token = f.RetryAt.UnixNano(), 0, ""
			heap.Fix(p.heapOf(r.transport), int(r.index))
			n++
		}
	}
	return n, nil
}

func (p *MemoryPersistence) settle(ctx context.Context, claims []Claim, fn func(*memRow)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range claims {
		if r := p.held(c); r != nil {
			fn(r)
			n++
		}
	}
	return n, nil
}

// held returns the row c names if c's token still holds it.
func (p *MemoryPersistence) held(c Claim) *memRow {
	if r := p.rows[c.ID]; r != nil && r.token != "" && r.token == c.Token {
		return r
	}
	return nil
}

// NextDueOutgoing returns when the earliest row of transport becomes claimable.
func (p *MemoryPersistence) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var next int64
	found := false
	for _, h := range p.heapsFor(transport) {
		if len(*h) > 0 && (!found || (*h)[0].available < next) {
			next, found = (*h)[0].available, true
		}
	}
	if !found {
		return time.Time{}, false, nil
	}
	return time.Unix(0, next), true, nil
}

// CancelOutgoing removes a row that is not leased and reports whether it did.
func (p *MemoryPersistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rows[id]
	now := p.now
	if p.clock != nil {
		now = max(now, p.clock.Now().UnixNano())
	} else {
		now = max(now, time.Now().UnixNano())
	}
	if r == nil || r.token != "" && r.lease > now {
		return false, nil
	}
	p.removeLocked(r)
	return true, nil
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

func (p *MemoryPersistence) heapOf(transport string) *rowHeap {
	h := p.heaps[transport]
	if h == nil {
		h = &rowHeap{}
		p.heaps[transport] = h
	}
	return h
}

// heapsFor returns the heaps a dispatcher of transport claims from: its own
// and the one of rows stored without a transport.
func (p *MemoryPersistence) heapsFor(transport string) []*rowHeap {
	hs := make([]*rowHeap, 0, 2)
	if h := p.heaps[transport]; h != nil {
		hs = append(hs, h)
	}
	if h := p.heaps[""]; h != nil && transport != "" {
		hs = append(hs, h)
	}
	return hs
}

func (p *MemoryPersistence) removeLocked(r *memRow) {
	heap.Remove(p.heapOf(r.transport), int(r.index))
	delete(p.rows, r.id)
}

func (r *memRow) outgoing() OutgoingMessage {
	return OutgoingMessage{
		ID: r.id, Kind: r.kind, Type: r.typ, Envelope: r.env, Transport: r.transport,
		DueAt: time.Unix(0, r.due), LeaseUntil: time.Unix(0, r.lease), Token: r.token,
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

package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultHealthTimeout bounds Bus.Health when its ctx has no deadline of
// its own, and is the default of HealthOptions.Timeout.
const DefaultHealthTimeout = time.Second

// Reachability is the outcome of a Pinger's check.
type Reachability uint8

// The reachabilities.
const (
	// ReachabilityUnknown: the backend does not implement Pinger.
	ReachabilityUnknown Reachability = iota
	// Reachable: the ping answered.
	Reachable
	// Unreachable: the ping failed or did not answer in time.
	Unreachable
)

// String returns "unknown", "reachable" or "unreachable".
func (r Reachability) String() string {
	switch r {
	case Reachable:
		return "reachable"
	case Unreachable:
		return "unreachable"
	}
	return "unknown"
}

// PingResult is the check of one backend in a HealthReport.
type PingResult struct {
	Status  Reachability
	Err     error         // why it is Unreachable; nil otherwise
	Latency time.Duration // how long the ping took; 0 when not pinged
}

// HealthReport is what Bus.Health found: the state a load balancer or an
// orchestrator judges a process by. The lags are read from the store and
// so hold for every process on it; the rest is this bus's.
type HealthReport struct {
	Time    time.Time // when the report was made, on the bus's clock
	Started bool      // Start succeeded and Stop was not called
	Stopped bool      // Stop was called
	// Dispatching is true when a dispatcher runs on this bus (a started
	// bus that is not SendOnly, whose persistence schedules and whose
	// Config.Dispatcher is not Disabled).
	Dispatching bool
	Transport   PingResult
	Store       PingResult
	// DispatchLag is the age of the oldest scheduled row of this bus's
	// transport that is claimable and not claimed: the time since the
	// earliest such row fell due (or, after a failed hand-over, since its
	// backoff ended, or since a lease that a stopped dispatcher held
	// lapsed), on the store's clock where it has one. 0 when every due row
	// was handed over, and for a persistence that does not schedule. A
	// dispatcher that keeps up holds it near 0.
	DispatchLag time.Duration
	// DispatchLagErr is why DispatchLag could not be read; nil otherwise.
	DispatchLagErr error
	// RecurringLag is how far the recurring schedules declared on this bus
	// are behind: the time since the oldest tick that passed without its
	// occurrence being stored, among the schedules that are not paused and
	// whose definition is this bus's (a schedule keeps its next ticks
	// stored ahead, so this is 0 while any declaring process keeps up). 0
	// without schedules, and before Start.
	RecurringLag time.Duration
	// RecurringLagErr is why RecurringLag could not be read; nil otherwise.
	RecurringLagErr error
	// LastClaim is when this bus's dispatcher last claimed due rows
	// successfully (found rows or not), on the bus's clock; zero before its
	// first claim and on a bus without a dispatcher.
	LastClaim time.Time
}

// Health checks the bus and its backends: its state, a ping of the
// transport and of the persistence (Pinger), the dispatch and recurring
// lags, and the dispatcher's last claim. The checks run at once, each
// bounded by ctx, or by DefaultHealthTimeout when ctx has no deadline. It
// never fails: what could not be checked says so in the report. The
// checks run on the backends' own connections, never in a transaction
// that ctx carries. HealthHandler serves it to probes.
func (b *Bus) Health(ctx context.Context) HealthReport {
	hctx, cancel := healthContext(ctx)
	defer cancel()
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	r := HealthReport{Time: b.clock.Now(), Started: st == stateStarted, Stopped: st == stateClosed}
	if d := b.dispatcher.Load(); d != nil && r.Started {
		r.Dispatching = true
		r.LastClaim = d.LastClaim()
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.Transport = ping(hctx, b.transport) })
	wg.Go(func() { r.Store = ping(hctx, b.cfg.Persistence) })
	wg.Go(func() { r.DispatchLag, r.DispatchLagErr = b.dispatchLag(hctx) })
	if r.Started {
		wg.Go(func() { r.RecurringLag, r.RecurringLagErr = b.recurringLag(hctx) })
	}
	wg.Wait()
	return r
}

// healthContext returns a ctx without ctx's values (so no transaction it
// carries is joined) that ends with ctx, or after DefaultHealthTimeout
// when ctx has no deadline.
func healthContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultHealthTimeout)
	}
	hctx, cancel := context.WithDeadline(context.Background(), deadline)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel() // at the deadline, hctx's own ends it: DeadlineExceeded
		}
	})
	return hctx, func() { stop(); cancel() }
}

// ping checks backend when it is a Pinger.
func ping(ctx context.Context, backend any) PingResult {
	p, ok := backend.(Pinger)
	if !ok {
		return PingResult{}
	}
	began := time.Now()
	err := p.Ping(ctx)
	r := PingResult{Status: Reachable, Latency: time.Since(began)}
	if err != nil {
		r.Status, r.Err = Unreachable, fmt.Errorf("bus: health: ping %T: %w", backend, err)
	}
	return r
}

// dispatchLag reads how long the earliest claimable row of this bus's
// transport has waited: now minus its claimable time, on the store's
// clock for a ClockedStore.
func (b *Bus) dispatchLag(ctx context.Context) (time.Duration, error) {
	if b.store == nil {
		return 0, nil
	}
	next, ok, err := b.store.NextDueOutgoing(ctx, b.identity)
	if err != nil {
		return 0, fmt.Errorf("bus: health: dispatch lag: %w", err)
	}
	if !ok {
		return 0, nil
	}
	now := b.clock.Now()
	if cs, ok := b.store.(ClockedStore); ok {
		if now, err = cs.StoreNow(ctx); err != nil {
			return 0, fmt.Errorf("bus: health: dispatch lag: %w", err)
		}
	}
	return max(now.Sub(next), 0), nil
}

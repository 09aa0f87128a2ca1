package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// How schedules made at runtime run.
//
// Every dispatcher on a RecurringRuntimeStore runs one loop: each poll
// interval it claims the runtime records whose Due passed (the store
// moves their Due a lease ahead, so that one dispatcher steps each), and
// steps each as a declaring process steps a declared schedule, with the
// same plan and the same compare-and-set. A step sets Due to the first
// tick it keeps stored ahead: a schedule is stepped once per tick, and
// between its ticks costs nothing, so the loop's cost grows with the
// ticks due, not with the schedules stored. A dispatcher killed while
// holding records leaves them to the others after the lease; the ticks
// it stored ahead are sent meanwhile.

const (
	// runtimeClaimBatch bounds the records one claim returns.
	runtimeClaimBatch = 500
	// runtimeEntryCache bounds the definitions a bus keeps parsed.
	runtimeEntryCache = 4096
	// runtimeStepWorkers bounds the claimed records stepped at once.
	runtimeStepWorkers = 8
)

// runtimeState is the bus's part of runtime schedules.
type runtimeState struct {
	passes  passTimer
	mu      sync.Mutex
	entries map[string]*recurringEntry // by name and fingerprint
	poke    chan struct{}
}

// pass is how long this bus's passes over due runtime schedules take.
func (rs *runtimeState) pass(now time.Time) time.Duration { return rs.passes.estimate(now) }

// entry returns the parsed definition of rec, from the cache when its
// fingerprint is there.
func (b *Bus) runtimeEntryCached(rec RecurringRecord) (*recurringEntry, error) {
	rs := &b.runtime
	rs.mu.Lock()
	key := rec.Name + "\x00" + rec.Fingerprint
	e, ok := rs.entries[key]
	rs.mu.Unlock()
	if ok && e.gen == rec.Generation {
		return e, nil
	}
	e, err := b.runtimeEntry(rec)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.entries == nil || len(rs.entries) >= runtimeEntryCache {
		rs.entries = map[string]*recurringEntry{}
	}
	rs.entries[key] = e
	return e, nil
}

// runRuntimeRecurring steps the runtime schedules that fall due until ctx
// ends (see the comment at the top of this file).
func (b *Bus) runRuntimeRecurring(ctx context.Context, st RecurringRuntimeStore) {
	limiter := loop.NewRateLimiter(loop.LogInterval)
	rs := &b.runtime
	watcher, _ := st.(interface {
		recurringWatch() (time.Time, bool, <-chan struct{})
	})
	for ctx.Err() == nil {
		var next time.Time
		var stored bool
		var changed <-chan struct{}
		if watcher != nil {
			next, stored, changed = watcher.recurringWatch()
		}
		began := b.clock.Now()
		rs.passes.begin(began)
		recs, err := st.ClaimDueRecurring(ctx, began, runtimeClaimBatch, b.cfg.Dispatcher.Lease)
		if err != nil && ctx.Err() == nil && limiter.Allow("claim", began) {
			b.log.Error("cannot claim the runtime recurring schedules due; retrying", slog.Any(logKeyError, err))
		}
		b.stepAll(ctx, st, recs, limiter)
		rs.passes.end(began, b.clock.Now(), len(recs) > 0)
		if len(recs) == runtimeClaimBatch {
			continue // more are due
		}
		if stored && next.IsZero() {
			next = b.clock.Now().Add(b.recurringRefresh()) // none due: look again now and then
		}
		b.runtimeSleep(ctx, watcher != nil && err == nil, next, changed)
	}
}

// runtimeSleep waits for the next claim: a poll interval, or, on a store
// that says when its runtime records change (the in-memory one), until
// the earliest Due or a change, with no timer while none is due.
func (b *Bus) runtimeSleep(ctx context.Context, watched bool, next time.Time, changed <-chan struct{}) {
	var tc <-chan time.Time
	switch {
	case !watched:
		t := b.clock.NewTimer(b.cfg.Dispatcher.PollInterval)
		defer t.Stop()
		tc = t.C()
	case !next.IsZero():
		t := b.clock.NewTimer(max(next.Sub(b.clock.Now()), 0))
		defer t.Stop()
		tc = t.C()
	}
	select {
	case <-tc:
	case <-changed:
	case <-b.runtime.poke:
	case <-ctx.Done():
	}
}

// stepAll steps the records of one claim, runtimeStepWorkers at a time:
// each step is a round trip or two to the store, and one after the other
// they would bound a process to about a thousand ticks a second.
func (b *Bus) stepAll(ctx context.Context, st RecurringRuntimeStore, recs []RecurringRecord, limiter *loop.RateLimiter) {
	sem := make(chan struct{}, runtimeStepWorkers)
	var wg sync.WaitGroup
	for i := range recs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.stepClaimed(ctx, st, recs[i]); err != nil && ctx.Err() == nil && limiter.Allow(recs[i].Name, b.clock.Now()) {
				b.log.Error("cannot step a runtime recurring schedule; another dispatcher retries after the lease",
					slog.String("recurring", recs[i].Name), slog.Any(logKeyError, err))
			}
		})
	}
	wg.Wait()
}

// stepClaimed steps the runtime record rec, which this bus claimed.
func (b *Bus) stepClaimed(ctx context.Context, st RecurringRuntimeStore, rec RecurringRecord) error {
	e, err := b.runtimeEntryCached(rec)
	if err != nil {
		return fmt.Errorf("its stored definition: %w", err)
	}
	_, err = b.stepRuntime(ctx, st, e, &rec, b.runtime.pass(b.clock.Now()))
	return err
}

// stepRuntime brings the record of the runtime schedule e up to date,
// starting from known when given, and reports whether it did: false when
// the record holds another definition or none any more (whoever changed
// it made it due again).
func (b *Bus) stepRuntime(ctx context.Context, st RecurringStore, e *recurringEntry, known *RecurringRecord, pass time.Duration) (bool, error) {
	for range recurringSteps {
		var rec RecurringRecord
		ok, err := true, error(nil)
		if known != nil {
			rec, known = *known, nil
		} else if rec, ok, err = st.LoadRecurring(ctx, e.r.Name); err != nil {
			return false, fmt.Errorf("load: %w", err)
		}
		if !ok {
			return false, nil
		}
		now := b.clock.Now()
		p := planRecurring(e, e.gen, rec, now, b.planParams(pass))
		if p.Superseded {
			return false, nil
		}
		if ok, err := b.applyStep(ctx, st, e, e.gen, rec, now, p, pass); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// wakeRuntime makes the runtime loop claim at once.
func (b *Bus) wakeRuntime() {
	select {
	case b.runtime.poke <- struct{}{}:
	default:
	}
}

package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// RecurringPolicy.Overlap: OverlapSkip skips an occurrence whose previous
// one of the same schedule is still being handled. The occurrence carries
// HeaderRecurringOverlap; the endpoint that receives it asks its
// persistence, a RecurringRunGuard, to begin the run before the handler
// and ends it after (success or failure); an occurrence that finds
// another run under way is acknowledged without its handler, logged and
// counted (Metrics.RecurringSkipped). A run that does not end (its process
// died) counts as finished after OverlapTimeout.

// HeaderRecurringOverlap is on the occurrences of a schedule with
// OverlapSkip: how long a run of it may take before it counts as finished
// (a time.Duration's text).
const HeaderRecurringOverlap = "postbus.recurring.overlap"

// RecurringRunGuard is implemented by persistences that tell a running
// occurrence of a schedule from a finished one, for RecurringPolicy's
// OverlapSkip. bustest.RecurringTests covers it.
type RecurringRunGuard interface {
	// BeginRecurringRun records that the occurrence id of the schedule
	// name runs until until, and reports true, unless another
	// occurrence's run of the schedule began and neither ended nor passed
	// its until at now. Beginning the run that is under way again (a
	// redelivery) reports true and moves its until.
	BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error)
	// EndRecurringRun ends the run id of the schedule name; the run of
	// another occurrence is left as it is.
	EndRecurringRun(ctx context.Context, name, id string) error
}

// guardOverlap begins the run of an occurrence of a schedule with
// OverlapSkip. It returns skip when another occurrence's run is under
// way, and otherwise a func that ends the run (nil for any other message).
func (b *Bus) guardOverlap(ctx context.Context, env *Envelope) (end func(), skip bool, err error) {
	timeout := env.Header(HeaderRecurringOverlap)
	name := env.Header(HeaderRecurringName)
	if timeout == "" || name == "" {
		return nil, false, nil
	}
	g, ok := b.cfg.Persistence.(RecurringRunGuard)
	if !ok {
		b.overlapOnce.Do(func() {
			b.log.Warn("a recurring occurrence asks to skip overlapping runs, but this endpoint's persistence cannot tell; it runs",
				slog.String("recurring", name), slog.String("persistence", fmt.Sprintf("%T", b.cfg.Persistence)))
		})
		return nil, false, nil
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d <= 0 {
		d = defaultOverlapTimeout
	}
	now := b.clock.Now()
	began, err := g.BeginRecurringRun(ctx, name, env.ID, now, now.Add(d))
	if err != nil {
		return nil, false, fmt.Errorf("bus: recurring %q: begin the run of %s: %w", name, env.ID, err)
	}
	if !began {
		b.metrics.recurringSkipped.Add(1)
		b.log.Info("recurring occurrence skipped: the previous one is still being handled",
			slog.String("recurring", name), slog.String("tick", env.Header(HeaderRecurringTick)), slog.String(logKeyMessageID, env.ID))
		return nil, true, nil
	}
	return func() {
		ectx, cancel := loop.Detach(ctx, settleTimeout)
		defer cancel()
		if err := g.EndRecurringRun(ectx, name, env.ID); err != nil {
			b.log.Warn("cannot end the run of a recurring occurrence; it counts as running until its timeout",
				slog.String("recurring", name), slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, err))
		}
	}, false, nil
}

// memoryRun is a run under way (MemoryPersistence's RecurringRunGuard).
type memoryRun struct {
	id    string
	until time.Time
}

var _ RecurringRunGuard = (*MemoryPersistence)(nil)

// BeginRecurringRun begins the run id of name unless another runs.
func (p *MemoryPersistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.runs[name]; ok && r.id != id && r.until.After(now) {
		return false, nil
	}
	if m.runs == nil {
		m.runs = map[string]memoryRun{}
	}
	m.runs[name] = memoryRun{id: id, until: until}
	return true, nil
}

// EndRecurringRun ends the run id of name.
func (p *MemoryPersistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &p.recur
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.runs[name]; ok && r.id == id {
		delete(m.runs, name)
	}
	return nil
}

package bus

import (
	"context"
	"fmt"
	"time"
)

// declaredSchedule is what the recurring lag needs of a schedule declared
// on this bus.
type declaredSchedule struct {
	schedule Schedule
	gen      int64 // the generation this bus declared at Start
}

// declaredSchedules returns the schedules declared on this bus, by name;
// nil before they were started. The names and entries do not change after
// Start (AddRecurring refuses then); gen is set under rs.mu.
func (b *Bus) declaredSchedules() map[string]declaredSchedule {
	rs := &b.recur
	if len(rs.names) == 0 || !rs.running() {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make(map[string]declaredSchedule, len(rs.names))
	for _, name := range rs.names {
		e := rs.entries[name]
		out[name] = declaredSchedule{schedule: e.r.Schedule, gen: e.gen}
	}
	return out
}

// recurringLag reads the records of this bus's schedules and returns the
// time since the oldest tick that passed without its occurrence stored:
// for each schedule that is not paused and runs this bus's definition,
// the first tick after the record's Last (the ticks through Last are
// stored or dealt with), when it is not in the future.
func (b *Bus) recurringLag(ctx context.Context) (time.Duration, error) {
	st, ok := b.cfg.Persistence.(RecurringStore)
	if !ok {
		return 0, nil
	}
	declared := b.declaredSchedules()
	if len(declared) == 0 {
		return 0, nil
	}
	recs, err := st.ListRecurring(ctx)
	if err != nil {
		return 0, fmt.Errorf("bus: health: recurring lag: %w", err)
	}
	now := b.clock.Now()
	var lag time.Duration
	for _, rec := range recs {
		d, ok := declared[rec.Name]
		if !ok || rec.Paused || rec.Generation != d.gen || rec.Last.IsZero() {
			continue
		}
		if next := safeNext(d.schedule, rec.Last); !next.IsZero() && !next.After(now) {
			lag = max(lag, now.Sub(next))
		}
	}
	return lag, nil
}

// safeNext returns s.Next(after), or zero when that user code panics.
func safeNext(s Schedule, after time.Time) (next time.Time) {
	defer func() {
		if recover() != nil {
			next = time.Time{}
		}
	}()
	return s.Next(after)
}

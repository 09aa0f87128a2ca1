package bus

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// What guards a schedule's step against the user code it calls and
// against the other processes that declare it.

// RecurringTickError is the failure of one occurrence of a recurring
// schedule: its Message panicked, returned nil or returned a message the
// bus cannot send (or outgoing middleware failed it). A step logs it,
// counts it (Metrics.RecurringFailed) and goes on with the later ticks;
// TriggerRecurring returns it. errors.Is(err, ErrInvalidMessage) holds.
type RecurringTickError struct {
	Name string    // the schedule
	Tick time.Time // the tick, or the trigger's time
	Err  error     // what went wrong
}

// Error describes the failure.
func (e *RecurringTickError) Error() string {
	return fmt.Sprintf("bus: recurring %q: the occurrence of %s: %v", e.Name, e.Tick.UTC().Format(time.RFC3339Nano), e.Err)
}

// Unwrap returns the cause, which wraps ErrInvalidMessage.
func (e *RecurringTickError) Unwrap() error { return e.Err }

// occurrence builds the occurrence of e for tick, with message ID id,
// through the outgoing pipeline, as SendBatch does, and returns it rather
// than sending it. The user code it runs (Message, outgoing middleware)
// may panic or return nothing: that fails this occurrence alone, with a
// *RecurringTickError.
func (b *Bus) occurrence(ctx context.Context, e *recurringEntry, tick time.Time, id string) (ps []pending, err error) {
	tick = tick.UTC()
	fail := func(cause error) error { return &RecurringTickError{Name: e.r.Name, Tick: tick, Err: cause} }
	defer func() {
		if r := recover(); r != nil {
			ps, err = nil, fail(fmt.Errorf("%w: building it panicked: %v", ErrInvalidMessage, r))
		}
	}()
	c := &collector{bus: b}
	cctx := context.WithValue(ctx, collectorKey{}, c)
	var env *Envelope
	ictx := cctx
	if e.spec != nil {
		env = e.spec.occurrence(id, tick, b.clock.Now())
	} else {
		msg := e.r.Message(tick)
		if msg == nil {
			return nil, fail(fmt.Errorf("%w: Message returned nil", ErrInvalidMessage))
		}
		opts := append(slices.Clip(e.r.Options), DeliverAt(tick), WithMessageID(id))
		var err error
		if env, ictx, err = b.prepare(cctx, e.kind, msg, opts); err != nil {
			return nil, fail(fmt.Errorf("%w: %w", ErrInvalidMessage, err))
		}
	}
	if env.DueAt.IsZero() {
		env.DueAt = tick // a tick that passed: due at once, and it says when it was due
	}
	env.SetHeader(HeaderRecurringName, e.r.Name)
	env.SetHeader(HeaderRecurringTick, tick.Format(time.RFC3339Nano))
	if pol := e.r.Policy; pol.Overlap == OverlapSkip {
		env.SetHeader(HeaderRecurringOverlap, cmp.Or(pol.OverlapTimeout, defaultOverlapTimeout).String())
	}
	if err := b.outgoing(ictx, env); err != nil {
		return nil, fail(fmt.Errorf("%w: %w", ErrInvalidMessage, err))
	}
	return c.take(), nil
}

// occurrences builds the occurrences of e's ticks for a step. A tick whose
// occurrence fails is logged, counted and left out: the step deals with it
// like the others, so the schedule goes on from the next tick.
func (b *Bus) occurrences(ctx context.Context, e *recurringEntry, ticks []time.Time) []pending {
	out := make([]pending, 0, len(ticks))
	for _, tick := range ticks {
		ps, err := b.occurrence(ctx, e, tick, recurringID(e.r.Name, tick, ""))
		if err != nil {
			b.metrics.recurringFailed.Add(1)
			b.log.Error("a recurring occurrence could not be built; its tick is skipped and the schedule goes on",
				slog.String("recurring", e.r.Name), slog.String("tick", tick.UTC().Format(time.RFC3339Nano)), slog.Any(logKeyError, err))
			continue
		}
		out = append(out, ps...)
	}
	return out
}

// noteSuperseded logs, once per winning generation, that a later
// declaration with another definition runs the schedule e declares on this
// bus: this bus stores none of its occurrences until it starts again with
// that definition.
func (b *Bus) noteSuperseded(e *recurringEntry, rec RecurringRecord) {
	b.recur.mu.Lock()
	seen, gen := e.supersededBy == rec.Generation, e.gen
	e.supersededBy = rec.Generation
	b.recur.mu.Unlock()
	if seen {
		return
	}
	b.log.Warn("recurring schedule superseded: another process declared another definition later, and it runs the schedule; "+
		"this process stores no occurrences for it until it restarts with that definition",
		slog.String("recurring", e.r.Name), slog.String("declared", e.text), slog.Int64("declared_generation", gen),
		slog.String("stored", rec.Schedule), slog.Int64("stored_generation", rec.Generation))
}

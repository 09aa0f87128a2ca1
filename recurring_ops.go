package bus

import (
	"context"
	"fmt"
	"time"
)

// recurringStore returns the persistence's RecurringStore, or an error
// wrapping ErrRecurringNotSupported. With the ctx of an outbox handling it
// refuses with ErrCannotJoinTx: the recurring calls run on the store's own
// connections and cannot join the handling's transaction (on SQLite they
// would wait for the connection the transaction holds).
func (b *Bus) recurringStore(ctx context.Context, op, name string) (RecurringStore, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	if err := b.checkNoTx(ctx, op+" recurring "+name); err != nil {
		return nil, err
	}
	st, ok := b.cfg.Persistence.(RecurringStore)
	if !ok {
		return nil, fmt.Errorf("bus: %s recurring %q: persistence %T: %w", op, name, b.cfg.Persistence, ErrRecurringNotSupported)
	}
	return st, nil
}

// localRecurring returns the schedule name as declared on this bus, or nil.
func (b *Bus) localRecurring(name string) *recurringEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.recur.entries[name]
}

// PauseRecurring pauses the stored schedule name for every process: no
// occurrence is stored for its ticks, and those already stored for ticks
// not yet due are cancelled (one a dispatcher is delivering goes ahead).
// The name need not be declared on this bus; a name the persistence does
// not know returns an error wrapping ErrUnknownRecurring.
func (b *Bus) PauseRecurring(ctx context.Context, name string) error {
	st, err := b.recurringStore(ctx, "pause", name)
	if err != nil {
		return err
	}
	ok, err := st.SetRecurringPaused(ctx, name, true, b.clock.Now())
	switch {
	case err != nil:
		return fmt.Errorf("bus: pause recurring %q: %w", name, err)
	case !ok:
		return fmt.Errorf("bus: pause recurring %q: %w", name, ErrUnknownRecurring)
	}
	if err := b.cancelAhead(ctx, st, name, 0, false); err != nil {
		return fmt.Errorf("bus: pause recurring %q: cancel stored occurrences: %w", name, err)
	}
	return nil
}

// ResumeRecurring resumes the stored schedule name for every process,
// from its next tick: ticks that passed while it was paused are not sent.
// A name the persistence does not know returns an error wrapping
// ErrUnknownRecurring.
func (b *Bus) ResumeRecurring(ctx context.Context, name string) error {
	st, err := b.recurringStore(ctx, "resume", name)
	if err != nil {
		return err
	}
	ok, err := st.SetRecurringPaused(ctx, name, false, b.clock.Now())
	switch {
	case err != nil:
		return fmt.Errorf("bus: resume recurring %q: %w", name, err)
	case !ok:
		return fmt.Errorf("bus: resume recurring %q: %w", name, ErrUnknownRecurring)
	}
	if e := b.localRecurring(name); e != nil && b.recur.running() {
		if _, err := b.stepRecurring(ctx, st, e, nil); err != nil {
			return fmt.Errorf("bus: resume recurring %q: %w", name, err)
		}
		b.wakeRecurring(e) // the loop plans its next step from the record
	}
	b.wakeRuntime() // a runtime schedule is due at once
	return nil
}

// maxBackfill bounds the ticks of one BackfillRecurring call.
const maxBackfill = 10_000

// BackfillRecurring stores one occurrence of the schedule name for each of
// its ticks in [from, to), due at the tick (at once for a tick that
// passed), whether or not the schedule is paused: to send what an outage,
// a pause or a late start skipped. Each backfilled tick has a message ID
// of its own (from the name and the tick), the same on every call, so a
// repeated call stores nothing twice while the first call's occurrences
// are stored, and receivers that de-duplicate by message ID drop the
// copies of one sent already. A range of more than 10,000 ticks is
// refused. The name must be declared on this bus or made at runtime.
func (b *Bus) BackfillRecurring(ctx context.Context, name string, from, to time.Time) error {
	st, err := b.recurringStore(ctx, "backfill", name)
	if err != nil {
		return err
	}
	e, err := b.recurringEntryOf(ctx, st, name)
	if err != nil {
		return fmt.Errorf("bus: backfill recurring %q: %w", name, err)
	}
	var ticks []time.Time
	for t := e.r.Schedule.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = e.r.Schedule.Next(t) {
		if len(ticks) == maxBackfill {
			return &RecurringError{Name: name, Field: "to", Reason: fmt.Sprintf("the range holds more than %d ticks: backfill it in parts", maxBackfill)}
		}
		ticks = append(ticks, t)
	}
	var ps []pending
	for _, t := range ticks {
		p, err := b.occurrence(ctx, e, t, recurringID(name, t, "backfill"))
		if err != nil {
			b.metrics.recurringFailed.Add(1)
			return err
		}
		ps = append(ps, p...)
	}
	if len(ps) == 0 {
		return nil
	}
	if err := b.schedule(ctx, ps); err != nil {
		return fmt.Errorf("bus: backfill recurring %q: %w", name, err)
	}
	b.metrics.recurring.Add(uint64(len(ps)))
	return nil
}

// recurringEntryOf returns the schedule name as this bus runs it: declared
// on this bus, or made at runtime and rebuilt from its record.
func (b *Bus) recurringEntryOf(ctx context.Context, st RecurringStore, name string) (*recurringEntry, error) {
	if e := b.localRecurring(name); e != nil {
		return e, nil
	}
	rec, ok, err := st.LoadRecurring(ctx, name)
	switch {
	case err != nil:
		return nil, err
	case !ok || rec.Spec == nil:
		return nil, fmt.Errorf("%w: neither declared on this bus nor made at runtime", ErrUnknownRecurring)
	}
	return b.runtimeEntry(rec)
}

// TriggerOption configures one TriggerRecurring call.
type TriggerOption func(*triggerOptions)

type triggerOptions struct{ key string }

// TriggerKey makes a trigger idempotent: every TriggerRecurring call of a
// schedule with the same key stores the same occurrence (its message ID
// is RecurringTriggerKeyID(name, key)), so a caller that does not know
// whether its call went through can retry it: the store keeps one row for
// the ID while it waits, and receivers that de-duplicate by message ID
// (the outbox's inbox, NATS within its window) drop a copy stored again
// after the first was sent. The key is 1 to 200 bytes.
func TriggerKey(key string) TriggerOption { return func(o *triggerOptions) { o.key = key } }

// TriggerRecurring stores one extra occurrence of the schedule name, due
// now, whether or not the schedule is paused; its HeaderRecurringTick is
// the trigger's time. Each call stores an occurrence of its own, unless
// TriggerKey names one that a call stored already. The name must be
// declared on this bus (AddRecurring), which builds the message, or made
// at runtime (SetRecurring); otherwise the error wraps
// ErrUnknownRecurring. An occurrence whose Message fails
// returns a *RecurringTickError.
func (b *Bus) TriggerRecurring(ctx context.Context, name string, opts ...TriggerOption) error {
	st, err := b.recurringStore(ctx, "trigger", name)
	if err != nil {
		return err
	}
	var o triggerOptions
	for _, opt := range opts {
		opt(&o)
	}
	e, err := b.recurringEntryOf(ctx, st, name)
	if err != nil {
		return fmt.Errorf("bus: trigger recurring %q: %w", name, err)
	}
	now := b.clock.Now()
	var id string
	switch {
	case o.key != "" && len(o.key) <= 200:
		id = RecurringTriggerKeyID(name, o.key)
	case o.key != "" || len(opts) > 0:
		return &RecurringError{Name: name, Field: "TriggerKey", Reason: "must be 1 to 200 bytes"}
	default:
		id = recurringID(name, now, "trigger\x00"+b.ids.New())
	}
	ps, err := b.occurrence(ctx, e, now, id)
	if err != nil {
		b.metrics.recurringFailed.Add(1)
		return err
	}
	if err := b.schedule(ctx, ps); err != nil {
		return fmt.Errorf("bus: trigger recurring %q: %w", name, err)
	}
	b.metrics.recurring.Add(uint64(len(ps)))
	return nil
}

// Recurrings lists the schedules stored in the persistence, by name,
// including those no process declares any more (Declared is false for the
// ones this bus does not declare). ListRecurrings pages through them.
func (b *Bus) Recurrings(ctx context.Context) ([]RecurringInfo, error) {
	st, err := b.recurringStore(ctx, "list", "")
	if err != nil {
		return nil, err
	}
	recs, err := st.ListRecurring(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: list recurring: %w", err)
	}
	return b.recurringInfos(recs), nil
}

// recurringInfos describes records as this bus sees them.
func (b *Bus) recurringInfos(recs []RecurringRecord) []RecurringInfo {
	now := b.clock.Now()
	out := make([]RecurringInfo, 0, len(recs))
	for _, rec := range recs {
		info := RecurringInfo{Name: rec.Name, Schedule: rec.Schedule, Paused: rec.Paused, Generation: rec.Generation,
			Runtime: rec.Spec != nil, Skipped: int(rec.Skipped)}
		for _, t := range rec.Ticks {
			switch {
			case !t.After(now):
				info.Last = t
			case info.Next.IsZero():
				info.Next = t
			}
		}
		e := b.localRecurring(rec.Name)
		info.Declared = e != nil
		info.Superseded = e != nil && e.fingerprint != rec.Fingerprint
		if e == nil && rec.Spec != nil && info.Next.IsZero() && !rec.Paused {
			e, _ = b.runtimeEntryCached(rec) // not stepped yet: its schedule says when
		}
		if e != nil && !info.Superseded && info.Next.IsZero() && !rec.Paused {
			info.Next = e.r.Schedule.Next(maxTime(now, rec.Last))
		}
		if rec.Paused {
			info.Next = time.Time{}
		}
		out = append(out, info)
	}
	return out
}

// DeleteRecurring removes the stored schedule name and cancels its stored
// occurrences (one a dispatcher is delivering goes ahead): for schedules
// that no process declares any more. A name declared on this bus is
// refused with a *RecurringError (a running process that declares it
// would store it again); an unknown one returns an error wrapping
// ErrUnknownRecurring.
func (b *Bus) DeleteRecurring(ctx context.Context, name string) error {
	st, err := b.recurringStore(ctx, "delete", name)
	if err != nil {
		return err
	}
	if b.localRecurring(name) != nil {
		return &RecurringError{Name: name, Field: "Name", Reason: "declared by this bus: remove its AddRecurring first"}
	}
	rec, ok, err := st.LoadRecurring(ctx, name)
	if err == nil && ok {
		ids := make([]string, len(rec.Ticks))
		for i, t := range rec.Ticks {
			ids[i] = recurringID(name, t, "")
		}
		ok, err = st.DeleteRecurring(ctx, name, ids)
	}
	switch {
	case err != nil:
		return fmt.Errorf("bus: delete recurring %q: %w", name, err)
	case !ok:
		return fmt.Errorf("bus: delete recurring %q: %w", name, ErrUnknownRecurring)
	}
	return nil
}

package bus

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/postbus/bus/internal/loop"
	"github.com/postbus/bus/internal/recurring"
)

// How recurring schedules run, with no leader.
//
// Every bus that declares a schedule runs the same step, at Start (before
// its dispatcher claims anything) and then whenever the first tick it
// knows stored ahead falls due. A step reads the schedule's record, plans
// what the record says is missing, and applies the plan with one
// AdvanceRecurring: a compare-and-set on the record's Generation and Last
// that stores and cancels occurrences in the same step. When several
// processes plan the same step, one applies it and the others find the
// record moved on and plan again from it, which usually finds nothing to
// do. An occurrence's message ID comes from the name and the tick, and a
// step stores only ticks after the record's Last, which only moves
// forward (a pause and a new definition excepted: they cancel the ticks
// not yet due and plan them again), so a tick is stored once.
//
// Between its ticks a schedule costs nothing: the loop sleeps until the
// earliest step due among this bus's schedules. Every recurringRefresh
// (ten poll intervals) it reads all records with one ListRecurring and
// steps each with its record, which finds what other processes changed:
// a resume, a new definition, a deleted record.
//
// A step keeps recurring.Ahead ticks ahead of now stored, and more when
// this bus's latest pass over its due schedules took longer (the ticks
// through twice that pass), so the occurrence after a tick is in the
// store before that tick is handed over, a process that starts while
// others run finds no tick missed, and a process killed at any moment
// loses no tick: the rest of the fleet, or the next process to start,
// carries on from the record.
//
// Each step that moves the record on also moves its liveness mark
// (RecurringRecord.Alive) to now plus the bus's liveness span (a poll
// interval and twice its pass). A tick that passed is missed only when the
// mark lapsed longer than the grace period (Dispatcher.PollInterval +
// Dispatcher.Lease) ago (within it, the process that set the mark may be
// behind rather than stopped, and a process that just started cannot
// measure how slow the others have become), the tick passed after the
// mark (widened by twice the reading bus's own pass: a store slow for one
// process is slow for all), and this bus did not step the schedule within
// the grace period before: then no declaring process was known to run
// across it. Other ticks between the record's Last and now are late,
// stored each once, and an occurrence stored for a tick that passed is
// left to the dispatcher, however late (a row a killed dispatcher held
// comes back after its lease). The schedule's MissedPolicy decides what
// is stored and cancelled for missed ticks; an occurrence stored for a
// missed tick counts as missed too.

// recurringSteps bounds the attempts of one step whose record keeps
// moving under it.
const recurringSteps = 8

// prepare readies the start of this bus's schedules, under the bus's
// lock in Start, and returns the channel that startRecurring closes once
// they are reconciled (nil without schedules).
func (rs *recurringState) prepare() chan struct{} {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.names) == 0 {
		return nil
	}
	rs.ready, rs.done = make(chan struct{}), make(chan struct{})
	rs.poke = make(chan struct{}, 1)
	return rs.ready
}

// waitRecurring waits until the schedules are reconciled, and reports
// false when ctx ended first.
func waitRecurring(ctx context.Context, ready chan struct{}) bool {
	if ready == nil {
		return true
	}
	select {
	case <-ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// startRecurring declares this bus's schedules and reconciles them, then
// starts the loop that keeps them stored ahead. Start calls it after the
// bus's lock is released (building a message reads the routes), and the
// dispatcher waits for it before its first claim.
func (b *Bus) startRecurring(ctx context.Context) error {
	rs := &b.recur
	if rs.ready == nil {
		return nil
	}
	defer close(rs.ready)
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rs.mu.Lock()
	rs.cancel = cancel
	rs.mu.Unlock()
	if err := b.checkOpen(); err != nil { // stopped before the loop could be stopped
		close(rs.done)
		return err
	}
	st := b.cfg.Persistence.(RecurringStore) // AddRecurring checked it
	began := b.clock.Now()
	rs.passes.begin(began)
	// One list finds the records already declared with this bus's
	// definitions: those need no declaration, and their steps plan from
	// the listed record, so a process starting beside running ones writes
	// nothing for the schedules they keep ahead.
	recs, err := st.ListRecurring(ctx)
	if err != nil {
		recs = nil // declare and load each
	}
	listed := make(map[string]RecurringRecord, len(recs))
	for _, r := range recs {
		listed[r.Name] = r
	}
	for _, name := range rs.names {
		e := rs.entries[name]
		var known *RecurringRecord
		if r, ok := listed[name]; ok && r.Fingerprint == e.fingerprint {
			rs.mu.Lock()
			e.gen = r.Generation
			rs.mu.Unlock()
			known = &r
		} else if err := b.declareRecurring(ctx, st, e); err != nil {
			close(rs.done)
			return err
		}
		w, err := b.stepRecurring(ctx, st, e, known)
		if err != nil {
			close(rs.done)
			return fmt.Errorf("bus: recurring %q: reconcile: %w", name, err)
		}
		e.setDue(w)
	}
	rs.passes.end(began, b.clock.Now(), true)
	go func() {
		defer close(rs.done)
		b.recurringLoop(lctx, st)
	}()
	return nil
}

// running reports whether the schedules were started.
func (rs *recurringState) running() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.cancel != nil
}

// stopRecurring stops the loop and waits for it.
func (b *Bus) stopRecurring() {
	rs := &b.recur
	rs.mu.Lock()
	cancel, done := rs.cancel, rs.done
	rs.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// recurringLoop steps each schedule when it is due: when the first tick
// stored ahead falls due (or a failed step is retried), so an idle
// schedule costs nothing between its ticks. Every recurringRefresh it
// reads all records with one ListRecurring and steps each with its record,
// which finds what other processes changed (a resume, a new definition, a
// deleted record); a local resume wakes it at once.
func (b *Bus) recurringLoop(ctx context.Context, st RecurringStore) {
	limiter := loop.NewRateLimiter(loop.LogInterval)
	rs := &b.recur
	refresh := b.recurringRefresh()
	nextRefresh := b.clock.Now().Add(refresh)
	for ctx.Err() == nil {
		began := b.clock.Now()
		var listed map[string]RecurringRecord
		if !began.Before(nextRefresh) {
			recs, err := st.ListRecurring(ctx)
			if err == nil {
				listed = make(map[string]RecurringRecord, len(recs))
				for _, r := range recs {
					listed[r.Name] = r
				}
			} else if ctx.Err() == nil && limiter.Allow("", began) {
				b.log.Error("cannot list the recurring schedules; stepping each when due",
					slog.Any(logKeyError, err))
			}
			nextRefresh = began.Add(refresh)
		}
		rs.passes.begin(began)
		stepped := 0
		for _, name := range rs.names {
			e := rs.entries[name]
			var rec *RecurringRecord
			if r, ok := listed[name]; ok {
				rec = &r
			} else if listed == nil && e.dueAt().After(began) {
				continue // not due
			}
			stepped++
			w, err := b.stepRecurring(ctx, st, e, rec)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if limiter.Allow(name, b.clock.Now()) {
					b.log.Error("cannot store the next occurrences of a recurring schedule; retrying",
						slog.String("recurring", name), slog.Any(logKeyError, err))
				}
				w = b.clock.Now().Add(b.cfg.Dispatcher.PollInterval)
			}
			e.setDue(w)
		}
		rs.passes.end(began, b.clock.Now(), stepped > 0)
		wake := nextRefresh
		for _, name := range rs.names {
			wake = minTime(wake, rs.entries[name].dueAt())
		}
		t := b.clock.NewTimer(max(wake.Sub(b.clock.Now()), 0))
		select {
		case <-t.C():
		case <-rs.poke:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// recurringRefresh is how often a process reads every schedule's record
// (10 × Dispatcher.PollInterval): the bound within which it sees what
// another process changed that it does not learn otherwise.
func (b *Bus) recurringRefresh() time.Duration { return 10 * b.cfg.Dispatcher.PollInterval }

// passTimer times a loop's passes over its schedules.
type passTimer struct {
	last  atomic.Int64 // the latest pass's duration, nanoseconds
	began atomic.Int64 // when the pass under way began (Unix nanoseconds), 0 between passes
}

func (p *passTimer) begin(now time.Time) { p.began.Store(now.UnixNano()) }

// end ends the pass that began at began, and records its duration when
// it counts (it stepped something).
func (p *passTimer) end(began, now time.Time, counts bool) {
	p.began.Store(0)
	if counts {
		p.last.Store(int64(now.Sub(began)))
	}
}

// estimate is how long a pass takes: the latest one's duration, or the
// time the pass under way has taken so far when that is longer.
func (p *passTimer) estimate(now time.Time) time.Duration {
	d := time.Duration(p.last.Load())
	if began := p.began.Load(); began != 0 {
		d = max(d, now.Sub(time.Unix(0, began)))
	}
	return d
}

// planParams returns the parameters of a step planned at now by a loop
// whose passes take pass.
func (b *Bus) planParams(pass time.Duration) planParams {
	poll := b.cfg.Dispatcher.PollInterval
	return planParams{grace: poll + b.cfg.Dispatcher.Lease, pass: pass, refresh: b.recurringRefresh()}
}

// wakeRecurring makes the loop step e at once.
func (b *Bus) wakeRecurring(e *recurringEntry) {
	e.setDue(time.Time{})
	select {
	case b.recur.poke <- struct{}{}:
	default:
	}
}

// declareRecurring records e's definition and the generation this bus
// runs. A new definition replacing an older one cancels the older one's
// occurrences not yet due, and plans the new one's from now.
func (b *Bus) declareRecurring(ctx context.Context, st RecurringStore, e *recurringEntry) error {
	rec, changed, err := st.DeclareRecurring(ctx, RecurringRecord{Name: e.r.Name, Fingerprint: e.fingerprint, Schedule: e.text})
	if err != nil {
		return fmt.Errorf("bus: recurring %q: declare: %w", e.r.Name, err)
	}
	b.recur.mu.Lock()
	e.gen = rec.Generation
	b.recur.mu.Unlock()
	if !changed || rec.Generation == 1 {
		return nil
	}
	b.log.Info("recurring schedule has a new definition; replacing the occurrences not yet due",
		slog.String("recurring", e.r.Name), slog.String("schedule", e.text), slog.Int64("generation", rec.Generation))
	return b.cancelAhead(ctx, st, e.r.Name, rec.Generation, true)
}

// cancelAhead cancels the occurrences of name stored for ticks after now.
// With restart (a new definition) it cancels those after now plus the
// dispatchers' look-ahead instead, and moves Last there, so the new
// definition's ticks are planned from then on: an occurrence due within
// the look-ahead may already be held by a dispatcher (it is being
// delivered, as with CancelScheduled), and a tick of the new definition
// at its time would get its message ID and go out twice.
func (b *Bus) cancelAhead(ctx context.Context, st RecurringStore, name string, gen int64, restart bool) error {
	for range recurringSteps {
		rec, ok, err := st.LoadRecurring(ctx, name)
		if err != nil || !ok || gen != 0 && rec.Generation != gen {
			return err
		}
		c := recurring.CancelAhead(planState(rec), b.clock.Now(), b.cfg.Dispatcher.LookAhead, restart)
		if c.Idle(planState(rec)) {
			return nil
		}
		adv := RecurringAdvance{Name: name, Generation: rec.Generation, Fingerprint: rec.Fingerprint,
			Paused: rec.Paused, From: rec.Last, Last: c.Last, Ticks: c.Ticks, Due: rec.Due, Runs: c.Runs, Skipped: rec.Skipped}
		for _, t := range c.Cancel {
			adv.Cancel = append(adv.Cancel, recurringID(name, t, ""))
		}
		ok, err = st.AdvanceRecurring(ctx, adv)
		if err != nil || ok {
			return err
		}
	}
	return nil
}

// stepRecurring brings e's record up to date, and returns when the next
// step is due. With known, the first attempt plans from that record
// (read by ListRecurring) instead of loading it.
func (b *Bus) stepRecurring(ctx context.Context, st RecurringStore, e *recurringEntry, known *RecurringRecord) (time.Time, error) {
	name := e.r.Name
	b.recur.mu.Lock()
	gen := e.gen
	b.recur.mu.Unlock()
	for range recurringSteps {
		var rec RecurringRecord
		ok, err := true, error(nil)
		if known != nil {
			rec, known = *known, nil
		} else {
			rec, ok, err = st.LoadRecurring(ctx, name)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("load: %w", err)
		}
		if !ok { // deleted while declared: declare it again
			if err := b.declareRecurring(ctx, st, e); err != nil {
				return time.Time{}, err
			}
			gen = e.gen
			continue
		}
		now := b.clock.Now()
		b.recur.mu.Lock()
		pp := b.planParams(b.recur.passes.estimate(now))
		pp.stepped = e.stepped
		b.recur.mu.Unlock()
		p := planRecurring(e, gen, rec, now, pp)
		if p.Superseded { // a later declaration runs it
			b.noteSuperseded(e, rec)
			return p.Wake, nil
		}
		b.recur.mu.Lock()
		e.stepped = now
		b.recur.mu.Unlock()
		ok, err = b.applyStep(ctx, st, e, gen, rec, now, p, pp.pass)
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			return p.Wake, nil
		}
	}
	return b.clock.Now().Add(b.cfg.Dispatcher.PollInterval), nil
}

// applyStep applies the plan p of a step of e (at generation gen) from
// rec at now with one AdvanceRecurring, and reports false when the record
// moved under it. A plan with nothing to write writes nothing, except the
// Due of a runtime schedule.
func (b *Bus) applyStep(ctx context.Context, st RecurringStore, e *recurringEntry, gen int64, rec RecurringRecord, now time.Time,
	p recurring.Plan, pass time.Duration) (bool, error) {
	if p.Idle(planState(rec)) && (e.spec == nil || p.Due.Equal(rec.Due)) {
		return true, nil
	}
	rows := b.rows(b.occurrences(ctx, e, p.Store), now)
	var cancel []string
	for _, t := range p.Cancel {
		cancel = append(cancel, recurringID(e.r.Name, t, ""))
	}
	adv := RecurringAdvance{Name: e.r.Name, Generation: gen, Fingerprint: e.fingerprint, Paused: rec.Paused,
		From: rec.Last, Last: p.Last, Ticks: p.Ticks, Store: rows, Cancel: cancel, Due: p.Due, Runs: p.Runs, Skipped: p.Skipped}
	if !rec.Paused {
		adv.Alive = now.Add(b.cfg.Dispatcher.PollInterval + 2*pass)
	}
	ok, err := st.AdvanceRecurring(ctx, adv)
	if err != nil {
		return false, fmt.Errorf("advance: %w", err)
	}
	if !ok {
		return false, nil
	}
	b.metrics.recurring.Add(uint64(len(rows)))
	if p.Skips > 0 {
		b.log.Info("recurring schedule skipped ticks by its policies", slog.String("recurring", e.r.Name),
			slog.Int(logKeyCount, p.Skips), slog.String("missed", e.r.Missed.String()))
	}
	if d := b.dispatcher.Load(); d != nil && len(p.Store) > 0 {
		d.Poke(slices.MinFunc(p.Store, time.Time.Compare))
	}
	return true, nil
}

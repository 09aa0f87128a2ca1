package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// RecurringSpec is a recurring schedule made at runtime (Bus.SetRecurring):
// stored with its message, so that any process on the persistence runs it,
// whatever code it has.
type RecurringSpec struct {
	// Name is the schedule's key, with the rules of Recurring.Name; one
	// namespace with the schedules declared in code.
	Name string
	// Schedule is the schedule's text, which Config.ParseSchedule turns
	// into a Schedule on every process: "@every 5m" by default, a cron
	// spec with robfig/cron's parser.
	Schedule string
	// Message is the message of every occurrence: a value, serialized once
	// by SetRecurring and stored with the schedule. Required.
	Message any
	// Publish: false sends the message as a command (to its Route, or To
	// in Options); true publishes it as an event.
	Publish bool
	// Options apply to every occurrence, as in Recurring.Options.
	Options []Option
	// Missed says what to do about ticks missed while no process ran.
	Missed MissedPolicy
	// Policy refines when ticks are sent.
	Policy RecurringPolicy
}

// RecurringFilter selects a page of schedules (Bus.ListRecurrings).
type RecurringFilter struct {
	// Prefix keeps the names that start with it.
	Prefix string
	// After keeps the names that sort after it (byte order): the last
	// name of the previous page.
	After string
	// Limit is the page's size. Default 100; at most 1000.
	Limit int
}

// storedSpec is RecurringRecord.Spec: what a process needs to run a
// runtime schedule without its code.
type storedSpec struct {
	Version  int             `json:"v"`
	Schedule string          `json:"schedule"`
	Missed   MissedPolicy    `json:"missed"`
	Policy   RecurringPolicy `json:"policy"`
	TTBR     time.Duration   `json:"ttbr,omitempty"`
	TTRQ     time.Duration   `json:"ttrq,omitempty"`
	// Envelope is the occurrences' envelope without ID, send time, due
	// time and timers, which each occurrence gets of its own.
	Envelope []byte `json:"envelope"`
}

// SetRecurring creates the stored schedule spec.Name, or replaces its
// definition, at any time, from any process, send-only buses included:
// every dispatcher on the persistence runs it from then on, from its next
// tick (the first dispatcher to poll stores its occurrences: within
// Dispatcher.PollInterval), with the same guarantees as a schedule declared in code (each
// tick once, never early, the missed-tick policy, pause, resume and
// trigger). Setting the same definition again changes nothing; another
// definition replaces the occurrences stored for ticks not yet due. The
// persistence must implement RecurringRuntimeStore.
//
// It refuses, with a *RecurringError: what AddRecurring refuses, a
// schedule text Config.ParseSchedule cannot parse, a nil Message, and a
// name this bus declares in code (AddRecurring).
func (b *Bus) SetRecurring(ctx context.Context, spec RecurringSpec) error {
	st, err := b.runtimeStore(ctx, "set", spec.Name)
	if err != nil {
		return err
	}
	e, raw, err := b.checkSpec(spec)
	if err != nil {
		return err
	}
	if b.localRecurring(spec.Name) != nil {
		return &RecurringError{Name: spec.Name, Field: "Name", Reason: "declared in code by this bus (AddRecurring)"}
	}
	now := b.clock.Now()
	rec, changed, err := st.DeclareRecurring(ctx, RecurringRecord{Name: spec.Name, Fingerprint: e.fingerprint,
		Schedule: e.text, Spec: raw, Due: now})
	if err != nil {
		return fmt.Errorf("bus: set recurring %q: %w", spec.Name, err)
	}
	if !changed {
		return nil
	}
	if rec.Generation > 1 {
		if err := b.cancelAhead(ctx, st, spec.Name, rec.Generation, true); err != nil {
			return fmt.Errorf("bus: set recurring %q: replace the stored occurrences: %w", spec.Name, err)
		}
	}
	if rec.Last.IsZero() {
		// Its ticks start now, not at the first step: a tick that falls
		// before a dispatcher polls is late, not missed (the mark vouches
		// for a poll interval).
		_, err := st.AdvanceRecurring(ctx, RecurringAdvance{Name: rec.Name, Generation: rec.Generation, Fingerprint: rec.Fingerprint,
			Paused: rec.Paused, Last: now, Due: rec.Due, Runs: rec.Runs, Skipped: rec.Skipped,
			Alive: now.Add(b.cfg.Dispatcher.PollInterval)})
		if err != nil { // a dispatcher that stepped it first started it itself
			return fmt.Errorf("bus: set recurring %q: %w", spec.Name, err)
		}
	}
	// The record is due now: a dispatcher stores its occurrences, through
	// the transport it dispatches with, which this bus (a send-only one,
	// a command-line tool's) may not share.
	b.wakeRuntime()
	return nil
}

// runtimeStore returns the persistence's RecurringRuntimeStore, or an
// error (see recurringStore).
func (b *Bus) runtimeStore(ctx context.Context, op, name string) (RecurringRuntimeStore, error) {
	if _, err := b.recurringStore(ctx, op, name); err != nil {
		return nil, err
	}
	st, ok := b.cfg.Persistence.(RecurringRuntimeStore)
	if !ok {
		return nil, fmt.Errorf("bus: %s recurring %q: persistence %T: %w: it must implement bus.RecurringRuntimeStore",
			op, name, b.cfg.Persistence, ErrRecurringNotSupported)
	}
	return st, nil
}

// checkSpec validates spec and builds the entry a process runs it with,
// and the Spec stored for it.
func (b *Bus) checkSpec(spec RecurringSpec) (*recurringEntry, []byte, error) {
	bad := func(field, reason string) (*recurringEntry, []byte, error) {
		return nil, nil, &RecurringError{Name: spec.Name, Field: field, Reason: reason}
	}
	if spec.Message == nil {
		return bad("Message", "required: the message every occurrence sends")
	}
	sched, err := b.parseSchedule(spec.Schedule)
	if err != nil {
		return bad("Schedule", err.Error())
	}
	msg := spec.Message
	e, err := b.checkRecurring(Recurring{Name: spec.Name, Schedule: sched, Publish: spec.Publish, Options: spec.Options,
		Missed: spec.Missed, Policy: spec.Policy, Message: func(time.Time) any { return msg }})
	if err != nil {
		return nil, nil, err
	}
	o, _ := parseOptions(spec.Options) // checkRecurring checked them
	env, err := b.newEnvelope(context.Background(), e.kind, msg, &o)
	if err != nil {
		return bad("Message", err.Error())
	}
	env.ID, env.SentAt, env.ExpiresAt = "", time.Time{}, time.Time{}
	if env.CorrelationID != "" && o.correlationID == "" {
		env.CorrelationID = "" // each occurrence is its own conversation, as a declared one's
	}
	delete(env.Headers, HeaderReachQueueBy)
	raw, err := json.Marshal(storedSpec{Version: 1, Schedule: spec.Schedule, Missed: spec.Missed, Policy: spec.Policy,
		TTBR: o.ttbr, TTRQ: o.ttrq, Envelope: MarshalEnvelope(env)})
	if err != nil {
		return bad("Message", err.Error())
	}
	sum := sha256.Sum256(append([]byte(spec.Name+"\x00"), raw...)) // a fingerprint is one schedule's, as the entry cache assumes
	e.fingerprint, e.text, e.spec = "rt-"+hex.EncodeToString(sum[:16]), spec.Schedule, &runtimeSpec{env: env, ttbr: o.ttbr, ttrq: o.ttrq}
	return e, raw, nil
}

// runtimeSpec is what the occurrences of a runtime schedule are built
// from: the stored envelope and timers.
type runtimeSpec struct {
	env        *Envelope
	ttbr, ttrq time.Duration
}

// runtimeEntry rebuilds the entry of the runtime record rec, as any
// process runs it.
func (b *Bus) runtimeEntry(rec RecurringRecord) (*recurringEntry, error) {
	var ss storedSpec
	if err := json.Unmarshal(rec.Spec, &ss); err != nil {
		return nil, fmt.Errorf("the stored definition: %w", err)
	}
	sched, err := b.parseSchedule(ss.Schedule)
	if err != nil {
		return nil, err
	}
	env, err := UnmarshalEnvelope(ss.Envelope)
	if err != nil {
		return nil, fmt.Errorf("the stored message: %w", err)
	}
	r := Recurring{Name: rec.Name, Schedule: ss.Policy.shape(rec.Name, sched), Publish: env.Kind == KindEvent,
		Missed: ss.Missed, Policy: ss.Policy}
	return &recurringEntry{r: r, kind: env.Kind, text: ss.Schedule, fingerprint: rec.Fingerprint, gen: rec.Generation,
		spec: &runtimeSpec{env: env, ttbr: ss.TTBR, ttrq: ss.TTRQ}}, nil
}

// runtimeOccurrence builds the envelope of a runtime schedule's
// occurrence for tick from its stored envelope.
func (s *runtimeSpec) occurrence(id string, tick, now time.Time) *Envelope {
	env := s.env.Clone()
	env.ID, env.SentAt, env.DueAt = id, now.UTC(), tick
	if env.CorrelationID == "" {
		env.CorrelationID = id
	}
	applyTimers(env, &sendOptions{ttbr: s.ttbr, ttrq: s.ttrq})
	return env
}

// ListRecurrings returns a page of the stored schedules, declared in code
// and made at runtime, in name order: those whose names start with
// f.Prefix and sort after f.After, at most f.Limit. The next page starts
// after the last name of this one.
func (b *Bus) ListRecurrings(ctx context.Context, f RecurringFilter) ([]RecurringInfo, error) {
	st, err := b.recurringStore(ctx, "list", f.Prefix)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = 100
	case limit > 1000:
		return nil, &RecurringError{Name: f.Prefix, Field: "Limit", Reason: "at most 1000"}
	}
	var recs []RecurringRecord
	if pst, ok := st.(RecurringRuntimeStore); ok {
		recs, err = pst.ListRecurringPage(ctx, f.Prefix, f.After, limit)
	} else {
		recs, err = st.ListRecurring(ctx)
		recs = pageRecords(recs, f.Prefix, f.After, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: list recurring: %w", err)
	}
	return b.recurringInfos(recs), nil
}

// pageRecords keeps the records of one page, for a store that lists all.
func pageRecords(recs []RecurringRecord, prefix, after string, limit int) []RecurringRecord {
	out := recs[:0]
	for _, r := range recs {
		if strings.HasPrefix(r.Name, prefix) && r.Name > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out
}

// parseSchedule turns a runtime schedule's text into a Schedule: "@every
// <duration>" always with ParseEvery, so that every process computes the
// same epoch-aligned ticks whatever parser it was given (robfig/cron's
// @every would count from each process's own previous tick), and any
// other text with Config.ParseSchedule.
func (b *Bus) parseSchedule(text string) (Schedule, error) {
	parse := b.cfg.ParseSchedule
	if strings.HasPrefix(strings.TrimSpace(text), "@every ") {
		parse = ParseEvery
	}
	s, err := parse(text)
	if err == nil && s == nil {
		err = fmt.Errorf("the parser returned no schedule")
	}
	if err != nil {
		return nil, fmt.Errorf("cannot parse %q: %w", text, err)
	}
	return s, nil
}

// ParseEvery parses "@every <duration>" (time.ParseDuration's syntax,
// such as "@every 5m" or "@every 1h30m") into Every(duration): ticks at
// the multiples of the duration since the Unix epoch. It is
// Config.ParseSchedule's default.
func ParseEvery(text string) (Schedule, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(text), "@every ")
	if !ok {
		return nil, fmt.Errorf("want \"@every <duration>\" (set Config.ParseSchedule for cron specs)")
	}
	d, err := time.ParseDuration(strings.TrimSpace(rest))
	if err != nil {
		return nil, err
	}
	if d <= 0 {
		return nil, fmt.Errorf("the interval must be positive, not %v", d)
	}
	return Every(d), nil
}

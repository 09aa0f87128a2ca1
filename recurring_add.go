package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// RecurringError reports a recurring schedule AddRecurring (or another
// recurring call) refuses. errors.Is(err, ErrInvalidRecurring) holds.
type RecurringError struct {
	Name   string // the schedule's name
	Field  string // the Recurring field at fault, e.g. "Schedule"
	Reason string
}

// Error describes the failure.
func (e *RecurringError) Error() string {
	return fmt.Sprintf("bus: recurring %q: %s: %s", e.Name, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidRecurring.
func (e *RecurringError) Unwrap() error { return ErrInvalidRecurring }

// maxRecurringName bounds Recurring.Name.
const maxRecurringName = 100

// recurringEntry is a schedule declared on this bus.
type recurringEntry struct {
	r           Recurring
	kind        Kind
	text        string // the schedule's text, for operators
	fingerprint string
	gen         int64 // the generation this bus declared at Start
	// stepped is when this bus last read the schedule's record in a step
	// (zero before its first): a step within the grace period after it
	// ran across the ticks in between, so they are late, not missed.
	stepped time.Time
	// spec builds the occurrences of a schedule made at runtime (nil for
	// one declared in code, whose r.Message does).
	spec *runtimeSpec
	// supersededBy is the generation of the later declaration that took
	// the schedule over, once this bus found it (zero before).
	supersededBy int64
	dueMu        sync.Mutex
	due          time.Time // when the loop steps the schedule next
}

// dueAt returns when the loop steps e next.
func (e *recurringEntry) dueAt() time.Time {
	e.dueMu.Lock()
	defer e.dueMu.Unlock()
	return e.due
}

// setDue says when the loop steps e next.
func (e *recurringEntry) setDue(t time.Time) {
	e.dueMu.Lock()
	defer e.dueMu.Unlock()
	e.due = t
}

// recurringState is the bus's part of recurring schedules.
type recurringState struct {
	mu      sync.Mutex
	entries map[string]*recurringEntry
	names   []string      // in the order they were added
	ready   chan struct{} // closed once Start reconciled the schedules
	cancel  func()        // stops the loop
	done    chan struct{} // closed when the loop returned
	// passes times this bus's passes over its schedules: a step stores
	// ticks ahead through twice the latest one, so the fleet's records
	// stay ahead of now however slow the store is.
	passes passTimer
	poke   chan struct{} // wakes the loop: a local resume
}

// AddRecurring declares a message sent on a schedule, by every process
// that declares it together: each tick is stored once in the persistence
// as an ordinary scheduled message, and sent once, when due, by any
// dispatcher. Call it before Start, like Handle. The persistence must
// implement RecurringStore (the in-memory one, postgres, sqlite and
// mongodb do).
//
// It refuses, with a *RecurringError: a Name that is not 1 to 100 of
// [A-Za-z0-9_.-], or that was added to this bus already; a nil Message; a
// nil Schedule, or one that yields no tick after now (Every(0)) or ticks
// closer than a millisecond; DeliverAfter, DeliverAt or WithMessageID in
// Options; an unknown Missed policy. Options are checked as Send checks
// them. After Start it returns ErrAlreadyStarted.
//
// Declaring a name whose stored definition differs (another schedule,
// destination, headers, Publish or Missed) replaces it at Start: the
// occurrences stored for ticks not yet due are cancelled and the new
// definition's are stored. The latest process to start with a definition
// wins; processes that declared an earlier one stop storing occurrences
// for that name until they start again, so a rolling deploy moves the
// schedule to the new definition once, without flapping.
func (b *Bus) AddRecurring(r Recurring) error {
	e, err := b.checkRecurring(r)
	if err != nil {
		return err
	}
	if _, ok := b.cfg.Persistence.(RecurringStore); !ok || b.store == nil {
		return fmt.Errorf("bus: recurring %q: persistence %T: %w: it must implement bus.RecurringStore", r.Name, b.cfg.Persistence, ErrRecurringNotSupported)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateStarted:
		return fmt.Errorf("bus: add recurring %q: %w: add schedules before Start", r.Name, ErrAlreadyStarted)
	case stateClosed:
		return ErrClosed
	}
	rs := &b.recur
	if _, dup := rs.entries[r.Name]; dup {
		return &RecurringError{Name: r.Name, Field: "Name", Reason: "added twice to this bus"}
	}
	if rs.entries == nil {
		rs.entries = map[string]*recurringEntry{}
	}
	rs.entries[r.Name] = e
	rs.names = append(rs.names, r.Name)
	return nil
}

// checkRecurring validates r and computes what AddRecurring keeps of it.
func (b *Bus) checkRecurring(r Recurring) (*recurringEntry, error) {
	bad := func(field, reason string) (*recurringEntry, error) {
		return nil, &RecurringError{Name: r.Name, Field: field, Reason: reason}
	}
	if err := validateRecurringName(r.Name); err != nil {
		return nil, err
	}
	switch {
	case r.Message == nil:
		return bad("Message", "required: a func(tick time.Time) any that builds the message")
	case r.Schedule == nil:
		return bad("Schedule", "required")
	case r.Missed > MissedSkip:
		return bad("Missed", fmt.Sprintf("unknown policy %d", r.Missed))
	}
	if field, reason := r.Policy.check(); field != "" {
		return bad(field, reason)
	}
	if _, ok := b.cfg.Persistence.(RecurringRunGuard); r.Policy.Overlap == OverlapSkip && !ok {
		return bad("Policy.Overlap", fmt.Sprintf("OverlapSkip needs a persistence that tells running occurrences (bus.RecurringRunGuard); %T does not", b.cfg.Persistence))
	}
	if ev, ok := r.Schedule.(every); ok && ev.d <= 0 {
		return bad("Schedule", fmt.Sprintf("the interval of Every must be positive, not %v", ev.d))
	}
	text := scheduleText(r.Schedule)
	r.Schedule = r.Policy.shape(r.Name, r.Schedule)
	now := b.clock.Now()
	first := r.Schedule.Next(now)
	if first.IsZero() || !first.After(now) {
		return bad("Schedule", "yields no tick after now")
	}
	if second := r.Schedule.Next(first); !second.IsZero() && second.Sub(first) < time.Millisecond {
		return bad("Schedule", "ticks closer than a millisecond")
	}
	o, err := parseOptions(r.Options)
	if err != nil {
		return nil, &RecurringError{Name: r.Name, Field: "Options", Reason: err.Error()}
	}
	switch {
	case o.hasAfter || o.hasAt:
		return bad("Options", "DeliverAfter and DeliverAt are not allowed: the schedule says when")
	case o.messageID != "":
		return bad("Options", "WithMessageID is not allowed: each occurrence gets an ID of its own")
	}
	kind := KindCommand
	if r.Publish {
		kind = KindEvent
	}
	return &recurringEntry{r: r, kind: kind, text: text, fingerprint: fingerprint(r, text, &o)}, nil
}

func validateRecurringName(name string) error {
	if name == "" || len(name) > maxRecurringName {
		return &RecurringError{Name: name, Field: "Name", Reason: "must be 1 to 100 bytes"}
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return &RecurringError{Name: name, Field: "Name", Reason: "only letters, digits, '.', '-' and '_' are allowed"}
		}
	}
	return nil
}

// scheduleText is the schedule's String(), or its Go type.
func scheduleText(s Schedule) string {
	if st, ok := s.(fmt.Stringer); ok {
		return st.String()
	}
	return fmt.Sprintf("%T", s)
}

// fingerprintFrom are the instants a fingerprint samples a schedule's
// ticks from: a winter and a summer day, so that time zones show.
var fingerprintFrom = [...]time.Time{time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2001, 7, 1, 0, 0, 0, 0, time.UTC)}

// fingerprint identifies a definition: the schedule (its text and a sample
// of its ticks, since a schedule without String, such as robfig/cron's,
// shows only its type), how the message is sent, and the missed policy.
// Every process computes the same one for the same declaration.
func fingerprint(r Recurring, text string, o *sendOptions) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%v\x00%d\x00", text, r.Publish, r.Missed)
	if pol := r.Policy; pol != (RecurringPolicy{}) {
		fmt.Fprintf(h, "policy %d %d %d %d %d %d %d\x00", pol.CatchUp, pol.Jitter, pol.Start.UnixNano(), pol.End.UnixNano(),
			pol.MaxRuns, pol.Overlap, pol.OverlapTimeout)
	}
	for _, from := range fingerprintFrom {
		t := from
		for range 8 {
			if t = r.Schedule.Next(t); t.IsZero() {
				break
			}
			fmt.Fprintf(h, "%d,", t.UnixMilli())
		}
	}
	fmt.Fprintf(h, "\x00%s\x00%v\x00%v\x00%v\x00%s\x00%d\x00%d\x00%s",
		o.destination, o.headers, o.attributes, o.sticky, o.correlationID, o.ttbr, o.ttrq, o.orderingKey)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// recurringID is the message ID of the occurrence of schedule name for
// tick (variant ""), or of a trigger (variant "trigger", or "trigger" and
// the trigger's key after a NUL byte): the same in every process, so the
// store keeps one row per tick. It is a UUIDv8 whose first 48 bits are the
// tick's Unix milliseconds, so IDs sort by tick, and whose other bits come
// from a SHA-256 of the inputs. Ticks compare at millisecond precision.
func recurringID(name string, tick time.Time, variant string) string {
	h := sha256.New()
	h.Write([]byte("postbus.recurring\x00"))
	h.Write([]byte(name))
	if variant != "" {
		h.Write([]byte("\x00" + variant))
	}
	h.Write([]byte{0})
	ms := tick.UnixMilli()
	h.Write([]byte(strconv.FormatInt(ms, 10)))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	if ms >= 0 {
		u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	}
	u[6] = 0x80 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return formatUUID(u)
}

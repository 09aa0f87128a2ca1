package bustest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// CancelOutboxReminder is the command whose handler cancels a scheduled
// reminder in the cancel cases, then fails when Fail is set.
type CancelOutboxReminder struct {
	ID   string
	Fail bool
}

// cancelDue is how far ahead the cancel cases schedule their reminders:
// long enough for a handling on a loaded machine to end before it.
const cancelDue = 3 * time.Second

// cancelHandlerTimeout bounds a handling of the cancel cases, so that a
// cancel waiting for a connection its own handling holds fails the case
// instead of hanging it.
const cancelHandlerTimeout = 15 * time.Second

// cancelResult is what one CancelScheduled call in a handler returned.
type cancelResult struct {
	ok   bool
	err  error
	took time.Duration
}

// cancelWorld is an outbox endpoint whose handler cancels reminders that
// the world's billing endpoint receives when they are due.
type cancelWorld struct {
	*outboxWorld
	b       *bus.Bus
	billing string
	mu      sync.Mutex
	results []cancelResult
}

func newCancelWorld(t *testing.T, h OutboxHarness, ns string) *cancelWorld {
	w := &cancelWorld{outboxWorld: newOutboxWorld(t, ns), billing: ns + "-billing"}
	w.b = StartBus(t, bus.Config{Endpoint: w.endpoint, Transport: w.tr, Persistence: h.Store,
		Outbox:         bus.OutboxConfig{Enabled: true},
		Retries:        bus.RetryConfig{Immediate: -1, Delayed: -1},
		HandlerTimeout: cancelHandlerTimeout,
		Observer:       &w.looks,
		Dispatcher:     bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m CancelOutboxReminder) error {
			start := time.Now()
			ok, err := b.CancelScheduled(ctx, m.ID)
			w.mu.Lock()
			w.results = append(w.results, cancelResult{ok: ok, err: err, took: time.Since(start)})
			w.mu.Unlock()
			if err != nil {
				return err
			}
			if m.Fail {
				return bus.Unrecoverable(errors.New("handler fails after cancelling"))
			}
			return nil
		})
	})
	return w
}

// schedule stores a reminder due in cancelDue, outside any transaction,
// and returns when it was scheduled: it must not arrive before then plus
// cancelDue.
func (w *cancelWorld) schedule(t *testing.T, id string) time.Time {
	t.Helper()
	at := time.Now()
	if err := w.b.Send(ctxFor(t), OutboxReminder{Key: id}, bus.To(w.billing), bus.DeliverAfter(cancelDue),
		bus.WithMessageID(id)); err != nil {
		t.Fatalf("schedule %s: %v", id, err)
	}
	return at
}

// handle runs one handling of CancelOutboxReminder to its conclusion.
func (w *cancelWorld) handle(t *testing.T, ns, id string, fail bool) {
	t.Helper()
	env := envelopeFor(ns, id+"-cancel", "")
	env.Type = bus.MessageName(CancelOutboxReminder{})
	env.Body = fmt.Appendf(nil, `{"ID":%q,"Fail":%t}`, id, fail)
	if err := w.b.Receive(ctxFor(t), env); err != nil {
		t.Fatalf("Receive: %v", err)
	}
}

// lastResult checks that the handler's cancel found the pending row at
// once (well within the handler timeout) and returns it.
func (w *cancelWorld) lastResult(t *testing.T) cancelResult {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.results) == 0 {
		t.Fatal("the handler never ran")
	}
	r := w.results[len(w.results)-1]
	if r.err != nil || !r.ok {
		t.Fatalf("CancelScheduled in the handling = %v, %v after %v; want true, nil", r.ok, r.err, r.took)
	}
	if r.took > cancelHandlerTimeout/3 {
		t.Errorf("CancelScheduled in the handling took %v: it waited for a connection", r.took)
	}
	return r
}

// expectReminder checks that exactly the reminder id arrived, not before
// scheduledAt plus cancelDue.
func (w *cancelWorld) expectReminder(t *testing.T, id string, scheduledAt time.Time) {
	t.Helper()
	w.reminders.WaitFor(t, 1)
	w.looks.waitEmptyClaim(t, time.Now()) // another reminder due by now would be dispatched
	got, at := w.reminders.Messages(), w.reminders.Times()
	if len(got) != 1 || got[0].Key != id {
		t.Fatalf("reminders %v, want only %s", got, id)
	}
	if early := scheduledAt.Add(cancelDue).Sub(at[0]); early > 0 {
		t.Errorf("the reminder arrived %v before its due time", early)
	}
}

// expectNoReminder waits past the due time of a cancelled reminder and
// checks that nothing arrived and no row is left.
func (w *cancelWorld) expectNoReminder(t *testing.T, h OutboxHarness, scheduledAt time.Time) {
	t.Helper()
	time.Sleep(time.Until(scheduledAt.Add(cancelDue + time.Second)))
	if n := w.reminders.Len(); n != 0 {
		t.Errorf("%d cancelled reminders arrived", n)
	}
	if _, ok, err := h.Store.NextDueOutgoing(ctxFor(t), "memory"); err != nil || ok {
		t.Errorf("a cancelled reminder left a row in the store (%v, %v)", ok, err)
	}
}

func testOutboxCancelRolledBack(t *testing.T, h OutboxHarness, ns string) {
	w := newCancelWorld(t, h, ns)
	errQ := drainQueue(t, w.tr, "error")
	at := w.schedule(t, ns+"-r1")
	w.handle(t, ns, ns+"-r1", true)
	w.lastResult(t)
	errQ.WaitFor(t, 1)
	w.expectReminder(t, ns+"-r1", at)
}

func testOutboxCancelCommitted(t *testing.T, h OutboxHarness, ns string) {
	w := newCancelWorld(t, h, ns)
	at := w.schedule(t, ns+"-r1")
	w.handle(t, ns, ns+"-r1", false)
	w.lastResult(t)
	w.expectNoReminder(t, h, at)
}

func testOutboxCancelInCallerTx(t *testing.T, h OutboxHarness, ns string) {
	w := newCancelWorld(t, h, ns)
	cancelIn := func(id string, commit bool) {
		t.Helper()
		txCtx, commitFn, rollbackFn, err := h.Begin(ctxFor(t))
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		cctx, cancel := context.WithTimeout(txCtx, cancelHandlerTimeout/3)
		ok, err := w.b.CancelScheduled(cctx, id)
		cancel()
		end := rollbackFn
		if commit {
			end = commitFn
		}
		if eerr := end(); eerr != nil {
			t.Fatalf("end of the caller's transaction: %v", eerr)
		}
		if err != nil || !ok {
			t.Fatalf("CancelScheduled in the caller's transaction = %v, %v; want true, nil", ok, err)
		}
	}
	at := w.schedule(t, ns+"-kept")
	cancelIn(ns+"-kept", false)
	w.expectReminder(t, ns+"-kept", at)

	at = w.schedule(t, ns+"-gone")
	cancelIn(ns+"-gone", true)
	time.Sleep(time.Until(at.Add(cancelDue + time.Second)))
	if got := w.reminders.Messages(); len(got) != 1 {
		t.Errorf("reminders %v: the one cancelled in a committed transaction arrived", got)
	}
}

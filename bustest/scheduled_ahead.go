package bustest

import (
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// The look-ahead cases of ScheduledMessageTests, for stores that are
// bus.AheadClaimers (Config.Dispatcher.LookAhead). A store without the
// capability has nothing to check in them.

func aheadClaimer(t *testing.T, s bus.ScheduledStore) (bus.AheadClaimer, bool) {
	t.Helper()
	a, ok := s.(bus.AheadClaimer)
	if !ok {
		t.Logf("%T does not claim ahead (bus.AheadClaimer): nothing to check", s)
	}
	return a, ok
}

func claimAhead(t *testing.T, a bus.AheadClaimer, ahead time.Duration, limit int, lease time.Duration) bus.AheadClaim {
	t.Helper()
	c, err := a.ClaimOutgoingAhead(ctxT(t), suiteTransport, time.Now(), ahead, limit, lease)
	if err != nil {
		t.Fatalf("ClaimOutgoingAhead: %v", err)
	}
	for _, m := range c.Rows {
		if m.Token == "" || m.AvailableAt.IsZero() {
			t.Fatalf("row %s claimed ahead without a lease token or AvailableAt: %+v", m.ID, m)
		}
	}
	return c
}

// A look-ahead claim takes the rows due within the window, overdue ones
// included, earliest first, with when each became claimable, and leases
// them past the window: no other claim takes them meanwhile.
func testAheadWindow(t *testing.T, s bus.ScheduledStore) {
	a, ok := aheadClaimer(t, s)
	if !ok {
		return
	}
	now := time.Now()
	mustStore(t, s, row("later", now.Add(time.Hour)), row("soon", now.Add(300*time.Millisecond)), row("overdue", now.Add(-time.Second)))
	const ahead, lease = 2 * time.Second, time.Hour
	before := time.Now()
	c := claimAhead(t, a, ahead, 10, lease)
	after := time.Now()
	if !slices.Equal(ids(c.Rows), []string{"overdue", "soon"}) {
		t.Fatalf("look-ahead claim = %v, want [overdue soon] (the window's rows, earliest first)", ids(c.Rows))
	}
	if c.Now.Before(before.Add(-time.Second)) || c.Now.After(after.Add(time.Second)) {
		t.Errorf("claim's Now = %v, want the store's time during the call [%v, %v]", c.Now, before, after)
	}
	for _, m := range c.Rows {
		if d := m.AvailableAt.Sub(m.DueAt); d < 0 || d > time.Millisecond {
			t.Errorf("row %s: AvailableAt %v, want its due time %v", m.ID, m.AvailableAt, m.DueAt)
		}
		// The store may read Now after the leasing: allow for the call.
		if m.LeaseUntil.Before(c.Now.Add(ahead + lease - after.Sub(before) - time.Millisecond)) {
			t.Errorf("row %s leased until %v, want the window and the lease after %v", m.ID, m.LeaseUntil, c.Now)
		}
	}
	if again := claim(t, s, 10, time.Hour); len(again) != 0 {
		t.Fatalf("rows claimed ahead were claimed again: %v", ids(again))
	}
	mustDelete(t, s, c.Rows)
	mustCancel(t, s, "later")
}

// A claimer that dies holding a row claimed ahead never settles it:
// another claimer takes it once the window and the lease have passed, not
// before, and the dead claimer's token no longer holds it.
func testAheadLeaseOfDeadClaimer(t *testing.T, s bus.ScheduledStore) {
	a, ok := aheadClaimer(t, s)
	if !ok {
		return
	}
	mustStore(t, s, row("held-ahead", time.Now().Add(200*time.Millisecond)))
	const ahead, lease = 500 * time.Millisecond, 300 * time.Millisecond
	start := time.Now()
	dead := claimAhead(t, a, ahead, 10, lease)
	if len(dead.Rows) != 1 {
		t.Fatalf("claimed %d rows ahead, want 1", len(dead.Rows))
	}
	var again bus.OutgoingMessage
	switch other := claimAhead(t, a, ahead, 10, time.Hour); {
	case len(other.Rows) == 0:
		again = waitClaim(t, s, time.Hour)
	case other.Now.Before(dead.Rows[0].LeaseUntil):
		t.Fatalf("a second look-ahead claim took %v at %v, held by the first until %v",
			ids(other.Rows), other.Now, dead.Rows[0].LeaseUntil)
	default:
		// A machine slow enough that the window and the lease passed
		// between the two claims: the second was right to take the row.
		again = other.Rows[0]
	}
	if el := time.Since(start); el < ahead+lease-10*time.Millisecond {
		t.Errorf("row claimed again %v after the look-ahead claim, before its window and lease (%v) passed", el, ahead+lease)
	}
	if again.ID != "held-ahead" || again.Token == dead.Rows[0].Token {
		t.Errorf("re-claim = %s with token %q, want held-ahead with a new token", again.ID, again.Token)
	}
	if n, err := s.DeleteOutgoing(ctxT(t), claims(dead.Rows)); err != nil || n != 0 {
		t.Fatalf("the dead claimer's DeleteOutgoing = %d, %v; want 0, nil", n, err)
	}
	mustDelete(t, s, []bus.OutgoingMessage{again})
}

// Rows claimed ahead and handed over the way the dispatcher does, at the
// claim's return plus AvailableAt−Now, are never handed over before their
// due time.
func testAheadHandOverNotEarly(t *testing.T, s bus.ScheduledStore) {
	a, ok := aheadClaimer(t, s)
	if !ok {
		return
	}
	const n = 100
	start := time.Now()
	mustStore(t, s, rows("ahead", n, func(i int) time.Time { return start.Add(200*time.Millisecond + time.Duration(i)*5*time.Millisecond) })...)
	got := 0
	poll.Eventually(t, time.Minute, func() bool {
		c := claimAhead(t, a, 100*time.Millisecond, 20, time.Hour)
		recv := time.Now()
		for _, m := range c.Rows {
			time.Sleep(time.Until(recv.Add(m.AvailableAt.Sub(c.Now)))) // a dispatcher hands it over then
			if early := time.Until(m.DueAt); early > 0 {
				t.Errorf("row %s handed over %v before it was due", m.ID, early)
			}
		}
		got += len(c.Rows)
		if len(c.Rows) > 0 {
			mustDelete(t, s, c.Rows)
		}
		return got >= n
	}, "%d rows claimed", n)
}

// aheadTick is the message of testAheadDispatcher.
type aheadTick struct{ N int }

// A bus dispatching from the store with a look-ahead window delivers each
// message once, none before its due time, and deletes the rows.
func testAheadDispatcher(t *testing.T, s bus.ScheduledStore) {
	p, ok := s.(bus.Persistence)
	if _, ahead := aheadClaimer(t, s); !ahead || !ok {
		return
	}
	tr := bus.NewMemoryTransport()
	ns := Namespace()
	in := NewRecorder[aheadTick]()
	b := StartBus(t, bus.Config{Endpoint: ns, Transport: tr, Persistence: p, SkipSetup: true,
		Dispatcher: bus.DispatcherConfig{LookAhead: 200 * time.Millisecond}},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	const n = 40
	first := time.Now().Add(300 * time.Millisecond)
	for i := range n {
		if err := b.Send(ctxT(t), aheadTick{N: i}, bus.To(ns), bus.DeliverAt(first.Add(time.Duration(i)*10*time.Millisecond))); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	in.expectExactly(t, n, 100*time.Millisecond)
	at := in.Times()
	for i, env := range in.Envelopes() {
		if early := env.DueAt.Sub(at[i]); early > 0 {
			t.Errorf("message %s delivered %v before it was due", env.ID, early)
		}
	}
	poll.Eventually(t, waitTimeout, func() bool {
		_, left, err := s.NextDueOutgoing(ctxT(t), tr.Identity())
		if err != nil {
			t.Fatalf("NextDueOutgoing: %v", err)
		}
		return !left
	}, "the delivered rows to be deleted")
}

// A release gives a row back the time it was claimable before the claim:
// a row put off by a failure's backoff, claimed ahead and then released (a
// dispatcher stopping, or its breaker opening), is not claimable before its
// backoff ends, and its due time does not come back.
func testReleaseKeepsTheRetryBackoff(t *testing.T, s bus.ScheduledStore) {
	a, ok := aheadClaimer(t, s)
	if !ok {
		return
	}
	mustStore(t, s, row("backoff", time.Now().Add(-time.Second)))
	first := claim(t, s, 10, time.Hour)
	if len(first) != 1 {
		t.Fatalf("claimed %d, want 1", len(first))
	}
	const backoff = 5 * time.Second
	failedAt := time.Now()
	if n, err := s.RecordOutgoingFailures(ctxT(t), []bus.OutgoingFailure{{ID: "backoff", Token: first[0].Token,
		Error: "transport down", RetryAfter: backoff, RetryAt: failedAt.Add(backoff)}}); err != nil || n != 1 {
		t.Fatalf("RecordOutgoingFailures = %d, %v; want 1, nil", n, err)
	}
	c := claimAhead(t, a, time.Hour, 10, time.Hour)
	if len(c.Rows) != 1 {
		t.Fatalf("look-ahead claim took %d rows, want the row in backoff", len(c.Rows))
	}
	if n, err := s.ReleaseOutgoing(ctxT(t), claims(c.Rows)); err != nil || n != 1 {
		t.Fatalf("ReleaseOutgoing = %d, %v; want 1, nil", n, err)
	}
	if got := claim(t, s, 10, time.Hour); len(got) != 0 {
		t.Fatalf("a released row was claimed %v after its failure, before its %v backoff ended", time.Since(failedAt), backoff)
	}
	next, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport)
	if err != nil || !ok || next.Before(failedAt.Add(backoff-time.Second)) {
		t.Errorf("NextDueOutgoing after the release = %v, %v, %v; want the end of the backoff, about %v", next, ok, err, failedAt.Add(backoff))
	}
	got := waitClaim(t, s, time.Hour)
	if got.Failures != 1 {
		t.Errorf("after the backoff claimed the row with %d failures, want 1", got.Failures)
	}
	mustDelete(t, s, []bus.OutgoingMessage{got})
}

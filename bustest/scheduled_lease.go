package bustest

import (
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// The lease-ownership and clock cases of ScheduledMessageTests.

func mustCancel(t *testing.T, s bus.ScheduledStore, id string) {
	t.Helper()
	if ok, err := s.CancelOutgoing(ctxT(t), id); err != nil || !ok {
		t.Fatalf("CancelOutgoing(%s) = %v, %v; want true, nil", id, ok, err)
	}
}

// waitLapsedCancel cancels id once its lease has lapsed, polling for up to
// 30 s: a running lease makes CancelOutgoing return false.
func waitLapsedCancel(t *testing.T, s bus.ScheduledStore, id string) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, func() bool {
		ok, err := s.CancelOutgoing(ctxT(t), id)
		if err != nil {
			t.Fatalf("CancelOutgoing: %v", err)
		}
		return ok
	}, "row %s to be cancellable after its lease lapsed", id)
}

// A row a dispatcher holds is being delivered: cancel says false and
// leaves it, and the holder's delete still removes it.
func testCancelLeased(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("leased", time.Now().Add(-time.Second)))
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	if ok, err := s.CancelOutgoing(ctxT(t), "leased"); err != nil || ok {
		t.Fatalf("CancelOutgoing of a leased row = %v, %v; want false, nil", ok, err)
	}
	mustDelete(t, s, got)
}

// A claimant whose lease lapsed, and whose row another claim took, changes
// nothing by settling: not the new holder's lease, not the failure count.
func testSettleAfterReclaim(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("contested", time.Now().Add(-time.Second)))
	old := claim(t, s, 10, 200*time.Millisecond)
	if len(old) != 1 {
		t.Fatalf("claimed %d, want 1", len(old))
	}
	current := waitClaim(t, s, time.Hour)
	stale := old[0].Claim()
	if n, err := s.DeleteOutgoing(ctxT(t), []bus.Claim{stale}); err != nil || n != 0 {
		t.Fatalf("stale DeleteOutgoing = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.ReleaseOutgoing(ctxT(t), []bus.Claim{stale}); err != nil || n != 0 {
		t.Fatalf("stale ReleaseOutgoing = %d, %v; want 0, nil", n, err)
	}
	n, err := s.RecordOutgoingFailures(ctxT(t), []bus.OutgoingFailure{{ID: stale.ID, Token: stale.Token, Error: "stale",
		RetryAt: time.Now(), RetryAfter: time.Nanosecond}})
	if err != nil || n != 0 {
		t.Fatalf("stale RecordOutgoingFailures = %d, %v; want 0, nil", n, err)
	}
	if got := claim(t, s, 10, time.Hour); len(got) != 0 {
		t.Fatalf("a stale settle made the row claimable again: %v", ids(got))
	}
	// The current holder still owns it, with no failure counted.
	if n, err := s.ReleaseOutgoing(ctxT(t), []bus.Claim{current.Claim()}); err != nil || n != 1 {
		t.Fatalf("holder's ReleaseOutgoing = %d, %v; want 1, nil", n, err)
	}
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 || got[0].Failures != 0 {
		t.Fatalf("after the holder's release claimed %+v, want the row with no failure", got)
	}
	mustDelete(t, s, got)
}

// A row cancelled after its claimant's lease lapsed, then stored again
// under the same ID, is a new row: the old claimant's delete leaves it, and
// the next claim returns the new envelope.
func testRestoreDuringLease(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("again", time.Now().Add(-time.Second)))
	old := claim(t, s, 10, 200*time.Millisecond)
	if len(old) != 1 {
		t.Fatalf("claimed %d, want 1", len(old))
	}
	waitLapsedCancel(t, s, "again")
	fresh := row("again", time.Now().Add(-time.Second))
	env, _ := bus.UnmarshalEnvelope(fresh.Envelope)
	env.Body = []byte(`{"n":2}`)
	fresh.Envelope = bus.MarshalEnvelope(env)
	mustStore(t, s, fresh)
	if n, err := s.DeleteOutgoing(ctxT(t), []bus.Claim{old[0].Claim()}); err != nil || n != 0 {
		t.Fatalf("old claimant's DeleteOutgoing = %d, %v; want 0, nil", n, err)
	}
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 || string(got[0].Envelope) != string(fresh.Envelope) {
		t.Fatalf("claim after re-store returned %d rows (want 1, with the new envelope)", len(got))
	}
	mustDelete(t, s, got)
}

// Rows carry the transport they were scheduled through; a claim takes its
// own transport's rows and rows stored without one, never another's.
func testTransportScope(t *testing.T, s bus.ScheduledStore) {
	due := time.Now().Add(-time.Second)
	other := row("other-transport", due)
	other.Transport = "bustest-other"
	legacy := row("no-transport", due)
	legacy.Transport = ""
	mustStore(t, s, row("own-transport", due), other, legacy)
	got := claim(t, s, 10, time.Hour)
	gotIDs := ids(got)
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, []string{"no-transport", "own-transport"}) {
		t.Fatalf("claimed %v, want [no-transport own-transport]", gotIDs)
	}
	mustDelete(t, s, got)
	if _, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport); err != nil || ok {
		t.Fatalf("NextDueOutgoing sees another transport's row (%v, %v)", ok, err)
	}
	theirs, err := s.ClaimDueOutgoing(ctxT(t), "bustest-other", time.Now(), 10, time.Hour)
	if err != nil || len(theirs) != 1 || theirs[0].ID != "other-transport" {
		t.Fatalf("the other transport's claim = %v, %v; want [other-transport]", ids(theirs), err)
	}
	if n, err := s.DeleteOutgoing(ctxT(t), claims(theirs)); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v", n, err)
	}
}

// A relative delay is measured on the store's clock when it has one: a
// sender whose clock is an hour behind (DueAt an hour early) cannot make
// the row due early. A store without a clock uses DueAt.
func testRelativeDelay(t *testing.T, s bus.ScheduledStore) {
	m := row("relative", time.Now().Add(-time.Hour))
	m.Delay = time.Hour
	mustStore(t, s, m)
	got := claim(t, s, 10, time.Hour)
	if _, clocked := s.(bus.ClockedStore); !clocked {
		if len(got) != 1 {
			t.Fatalf("a store without a clock must use DueAt: claimed %d rows, want 1", len(got))
		}
		mustDelete(t, s, got)
		return
	}
	if len(got) != 0 {
		t.Fatalf("row due in an hour on the store's clock was claimed now (the sender's DueAt was used)")
	}
	next, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport)
	if err != nil || !ok || next.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("NextDueOutgoing = %v, %v, %v; want about an hour from now", next, ok, err)
	}
	mustCancel(t, s, "relative")
}

// A failure's RetryAfter is measured on the store's clock when it has one.
func testRelativeRetry(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("retry-relative", time.Now().Add(-time.Second)))
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	_, clocked := s.(bus.ClockedStore)
	f := bus.OutgoingFailure{ID: got[0].ID, Token: got[0].Token, Error: "boom", RetryAfter: time.Hour, RetryAt: time.Now().Add(-time.Hour)}
	if !clocked {
		f.RetryAt = time.Now().Add(time.Hour)
	}
	if n, err := s.RecordOutgoingFailures(ctxT(t), []bus.OutgoingFailure{f}); err != nil || n != 1 {
		t.Fatalf("RecordOutgoingFailures = %d, %v; want 1, nil", n, err)
	}
	if again := claim(t, s, 10, time.Hour); len(again) != 0 {
		t.Fatalf("row claimable before its retry time: %v", ids(again))
	}
	mustCancel(t, s, "retry-relative")
}

// A store used through a transport without an identity claims the rows
// stored without one, each once.
func testEmptyTransport(t *testing.T, s bus.ScheduledStore) {
	due := time.Now().Add(-time.Second)
	a, b := row("anonymous-1", due), row("anonymous-2", due)
	a.Transport, b.Transport = "", ""
	mustStore(t, s, a, b)
	got, err := s.ClaimDueOutgoing(ctxT(t), "", time.Now(), 10, time.Hour)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim with an empty transport = %v, %v; want both rows once", ids(got), err)
	}
	if n, err := s.DeleteOutgoing(ctxT(t), claims(got)); err != nil || n != 2 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 2", n, err)
	}
}

package mongodb_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
)

// A Delay and a RetryAfter are measured from the server's time, read
// during the call: the due time lies between the server times read just
// before and just after it, plus the delay (and a millisecond of rounding).
// The sender's DueAt and RetryAt, an hour early, are not used.
func TestRelativeTimesAreOnTheServersClock(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	const d = time.Hour
	within := func(what string, at, before, after time.Time) {
		t.Helper()
		lo, hi := before.Add(d), after.Add(d+2*time.Millisecond)
		if at.Before(lo) || at.After(hi) {
			t.Errorf("%s claimable at %v, want within [%v, %v]", what, at, lo, hi)
		}
	}

	before, err := p.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := outgoing("delayed", time.Now().Add(-time.Hour))
	m.Delay = d
	mustStore(t, p, m)
	after, err := p.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next, ok, err := p.NextDueOutgoing(ctx, testTransport)
	if err != nil || !ok {
		t.Fatalf("NextDueOutgoing = %v, %v", ok, err)
	}
	within("a row stored with Delay", next, before, after)
	mustCancel(t, p, "delayed")

	mustStore(t, p, outgoing("failing", time.Now().Add(-time.Second)))
	got := mustClaim(t, p, 10, time.Hour)
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	before, _ = p.StoreNow(ctx)
	n, err := p.RecordOutgoingFailures(ctx, []bus.OutgoingFailure{{ID: got[0].ID, Token: got[0].Token,
		Error: "boom", RetryAfter: d, RetryAt: time.Now().Add(-time.Hour)}})
	if err != nil || n != 1 {
		t.Fatalf("RecordOutgoingFailures = %d, %v; want 1", n, err)
	}
	after, _ = p.StoreNow(ctx)
	if next, ok, err = p.NextDueOutgoing(ctx, testTransport); err != nil || !ok {
		t.Fatalf("NextDueOutgoing = %v, %v", ok, err)
	}
	within("a failure with RetryAfter", next, before, after)
	mustCancel(t, p, "failing")
}

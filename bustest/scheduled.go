package bustest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// StoreFactory returns a new, empty, isolated store for one test case.
type StoreFactory func(t *testing.T) bus.ScheduledStore

// ScheduledMessageTests runs the scheduled-message store contract against
// stores made by newStore. Times are real wall-clock times, because stores
// with a clock of their own compare on it. Waits for leases to lapse poll
// with generous deadlines, so a loaded machine slows the suite down but
// does not fail it. The cases of the lease-ownership contract are in
// scheduled_lease.go, those of look-ahead claims (bus.AheadClaimer) in
// scheduled_ahead.go.
func ScheduledMessageTests(t *testing.T, newStore StoreFactory) {
	cases := []storeCase[bus.ScheduledStore]{
		{"RoundTripKeepsEveryField", testRoundTrip},
		{"ClaimsOnlyDueRowsEarliestFirst", testClaimOrder},
		{"LeasedRowIsNotClaimedUntilLeaseLapses", testLease},
		{"ConcurrentClaimersClaimEachRowOnce", testConcurrentClaims},
		{"StoreIsIdempotentByID", testIdempotentStore},
		{"IDsAreKeptByteForByte", testIDsByteForByte},
		{"RowsAMicrosecondApartAreClaimedInDueOrder", testMicrosecondApartInDueOrder},
		{"Cancel", testCancel},
		{"FailureCounting", testFailures},
		{"Release", testRelease},
		{"ReleaseKeepsTheRetryBackoff", testReleaseKeepsTheRetryBackoff},
		{"NextDue", testNextDue},
		{"NoRowIsClaimedEarly", testNotEarly},
		{"LargeBatch", testLargeBatch},
		{"CancelOfLeasedRowReturnsFalse", testCancelLeased},
		{"SettleAfterLapseAndReclaimChangesNothing", testSettleAfterReclaim},
		{"RestoreOfCancelledIDDuringLease", testRestoreDuringLease},
		{"ClaimsOnlyRowsOfItsTransport", testTransportScope},
		{"EmptyTransportClaimsRowsWithoutOne", testEmptyTransport},
		{"RelativeDelayOnStoreClock", testRelativeDelay},
		{"RelativeRetryOnStoreClock", testRelativeRetry},
		{"BulkStoreOf10000Rows", testBulkStore},
		{"LookAheadClaimTakesTheWindow", testAheadWindow},
		{"LookAheadRowsOfADeadClaimerReturnAfterLease", testAheadLeaseOfDeadClaimer},
		{"LookAheadRowIsNeverHandedOverEarly", testAheadHandOverNotEarly},
		{"LookAheadDispatcherDeliversOnTime", testAheadDispatcher},
	}
	runStoreCases(t, newStore, cases, func(t *testing.T, s bus.ScheduledStore) { assertEmpty(t, s) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// row makes a stored message whose envelope really decodes, due at due.
func row(id string, due time.Time) bus.OutgoingMessage {
	env := &bus.Envelope{
		ID: id, Type: "bustest.Row", Kind: bus.KindCommand, Body: []byte(`{"n":1}`),
		ContentType: "application/json", Destination: "bustest-queue", Source: "bustest",
		Headers: map[string]string{"h": "v"}, Attributes: map[string]string{"a": "1"},
		StickyAttributes: map[string]string{"s": "2"}, CorrelationID: "corr-" + id,
		SentAt: time.Now().UTC(), DueAt: due.UTC(),
	}
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: env.Type, Envelope: bus.MarshalEnvelope(env), DueAt: due, Transport: suiteTransport}
}

// suiteTransport is the transport identity of the suite's rows.
const suiteTransport = "bustest-transport"

func rows(prefix string, n int, due func(i int) time.Time) []bus.OutgoingMessage {
	out := make([]bus.OutgoingMessage, n)
	for i := range out {
		out[i] = row(fmt.Sprintf("%s-%06d", prefix, i), due(i))
	}
	return out
}

func mustStore(t *testing.T, s bus.ScheduledStore, msgs ...bus.OutgoingMessage) {
	t.Helper()
	if err := s.StoreOutgoing(ctxT(t), msgs); err != nil {
		t.Fatalf("StoreOutgoing: %v", err)
	}
}

func claim(t *testing.T, s bus.ScheduledStore, limit int, lease time.Duration) []bus.OutgoingMessage {
	t.Helper()
	got, err := s.ClaimDueOutgoing(ctxT(t), suiteTransport, time.Now(), limit, lease)
	if err != nil {
		t.Fatalf("ClaimDueOutgoing: %v", err)
	}
	for _, m := range got {
		if m.Token == "" {
			t.Fatalf("claimed row %s has no lease token", m.ID)
		}
	}
	return got
}

func claims(msgs []bus.OutgoingMessage) []bus.Claim {
	out := make([]bus.Claim, len(msgs))
	for i := range msgs {
		out[i] = msgs[i].Claim()
	}
	return out
}

func ids(msgs []bus.OutgoingMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// mustDelete deletes claimed rows and checks that every one was still held.
func mustDelete(t *testing.T, s bus.ScheduledStore, msgs []bus.OutgoingMessage) {
	t.Helper()
	n, err := s.DeleteOutgoing(ctxT(t), claims(msgs))
	if err != nil {
		t.Fatalf("DeleteOutgoing: %v", err)
	}
	if n != len(msgs) {
		t.Fatalf("DeleteOutgoing deleted %d of %d claimed rows", n, len(msgs))
	}
}

// assertEmpty is the invariant check after every case: no row left behind,
// leased or not.
func assertEmpty(t *testing.T, s bus.ScheduledStore) {
	t.Helper()
	if _, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport); err != nil || ok {
		t.Errorf("store not empty after the case (rows left: %v, err: %v)", ok, err)
	}
}

func testRoundTrip(t *testing.T, s bus.ScheduledStore) {
	due := time.Now().Add(-time.Second).Add(123456 * time.Nanosecond)
	want := row("round-trip", due)
	want.Kind = bus.KindEvent
	mustStore(t, s, want)
	got := claim(t, s, 10, time.Minute)
	if len(got) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(got))
	}
	g := got[0]
	if g.ID != want.ID || g.Kind != want.Kind || g.Type != want.Type || string(g.Envelope) != string(want.Envelope) || g.Failures != 0 {
		t.Errorf("round trip changed the row: got %+v, want %+v", g, want)
	}
	if !g.DueAt.Equal(due.Truncate(time.Microsecond)) && !g.DueAt.Equal(due) {
		t.Errorf("DueAt = %v, want %v (microsecond precision)", g.DueAt, due)
	}
	if _, err := bus.UnmarshalEnvelope(g.Envelope); err != nil {
		t.Errorf("stored envelope no longer decodes: %v", err)
	}
	if g.LeaseUntil.Before(time.Now().Add(30 * time.Second)) {
		t.Errorf("LeaseUntil = %v, want about a minute from now", g.LeaseUntil)
	}
	if n, err := s.DeleteOutgoing(ctxT(t), []bus.Claim{g.Claim(), {ID: "never-stored", Token: g.Token}}); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 1, nil (unknown IDs ignored)", n, err)
	}
	if again := claim(t, s, 10, time.Minute); len(again) != 0 {
		t.Errorf("deleted row claimed again: %v", ids(again))
	}
}

func testClaimOrder(t *testing.T, s bus.ScheduledStore) {
	now := time.Now()
	mustStore(t, s,
		row("c", now.Add(-1*time.Second)), row("future", now.Add(time.Hour)),
		row("a", now.Add(-3*time.Second)), row("b", now.Add(-2*time.Second)))
	first := claim(t, s, 2, time.Minute)
	if !slices.Equal(ids(first), []string{"a", "b"}) {
		t.Fatalf("first claim = %v, want [a b] (earliest first, limit 2)", ids(first))
	}
	second := claim(t, s, 10, time.Minute)
	if !slices.Equal(ids(second), []string{"c"}) {
		t.Fatalf("second claim = %v, want [c] (future row must stay)", ids(second))
	}
	mustDelete(t, s, append(first, second...))
	mustCancel(t, s, "future")
}

func testLease(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("held", time.Now().Add(-time.Second)), row("lapsing", time.Now().Add(-time.Second)))
	held := claim(t, s, 1, time.Hour)
	if !slices.Equal(ids(held), []string{"held"}) {
		t.Fatalf("claimed %v, want [held]", ids(held))
	}
	const lease = 300 * time.Millisecond
	start := time.Now()
	first := claim(t, s, 10, lease)
	if !slices.Equal(ids(first), []string{"lapsing"}) {
		t.Fatalf("claimed %v, want [lapsing] (the held row must not be claimed again)", ids(first))
	}
	again := waitClaim(t, s, time.Hour)
	if el := time.Since(start); el < lease-10*time.Millisecond {
		t.Errorf("row claimed again after %v, before its %v lease lapsed", el, lease)
	}
	if again.ID != "lapsing" || again.Token == first[0].Token {
		t.Errorf("re-claim = %s with token %q, want lapsing with a new token (old %q)", again.ID, again.Token, first[0].Token)
	}
	mustDelete(t, s, append(held, again))
}

// waitClaim claims until one row comes back, for up to 30 s.
func waitClaim(t *testing.T, s bus.ScheduledStore, lease time.Duration) bus.OutgoingMessage {
	t.Helper()
	var got []bus.OutgoingMessage
	poll.Eventually(t, 30*time.Second, func() bool { got = claim(t, s, 1, lease); return len(got) == 1 }, "a claimable row")
	return got[0]
}

func testConcurrentClaims(t *testing.T, s bus.ScheduledStore) {
	ClaimConcurrently(t, 2000, s, s, s, s, s, s)
}

// ClaimConcurrently stores n due rows through stores[0], then runs one
// claimer per element of stores at once (name one store value several times
// for several claimers on it, or different values, such as two clients, for
// claimers in different "processes"), each claiming batches and deleting
// them until nothing is due. It fails the test unless every row was claimed
// exactly once.
func ClaimConcurrently(t *testing.T, n int, stores ...bus.ScheduledStore) {
	t.Helper()
	now := time.Now()
	mustStore(t, stores[0], rows("cc", n, func(i int) time.Time { return now.Add(-time.Duration(i%50) * time.Millisecond) })...)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, len(stores))
	for _, s := range stores {
		wg.Go(func() {
			for {
				got, err := s.ClaimDueOutgoing(ctxT(t), suiteTransport, time.Now(), 37, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, m := range got {
					seen[m.ID]++
				}
				mu.Unlock()
				if n, err := s.DeleteOutgoing(ctxT(t), claims(got)); err != nil || n != len(got) {
					errs <- fmt.Errorf("deleted %d of %d claimed rows: %v", n, len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("claimer: %v", err)
	}
	if len(seen) != n {
		t.Errorf("claimed %d distinct rows, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("row %s claimed %d times", id, c)
		}
	}
}

func testIdempotentStore(t *testing.T, s bus.ScheduledStore) {
	due := time.Now().Add(-time.Second)
	mustStore(t, s, row("dup", due))
	mustStore(t, s, row("dup", due), row("other", due))
	claimed := claim(t, s, 10, time.Minute)
	got := ids(claimed)
	slices.Sort(got)
	if !slices.Equal(got, []string{"dup", "other"}) {
		t.Fatalf("claimed %v, want dup and other once each", got)
	}
	mustDelete(t, s, claimed)
}

func testCancel(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("cancel-me", time.Now().Add(-time.Second)), row("keep", time.Now().Add(-time.Second)))
	ok, err := s.CancelOutgoing(ctxT(t), "cancel-me")
	if err != nil || !ok {
		t.Fatalf("CancelOutgoing = %v, %v; want true, nil", ok, err)
	}
	if ok, err = s.CancelOutgoing(ctxT(t), "cancel-me"); err != nil || ok {
		t.Fatalf("second CancelOutgoing = %v, %v; want false, nil", ok, err)
	}
	got := claim(t, s, 10, time.Minute)
	if !slices.Equal(ids(got), []string{"keep"}) {
		t.Fatalf("claim after cancel = %v, want [keep]", ids(got))
	}
	mustDelete(t, s, got)
}

func testFailures(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("failing", time.Now().Add(-time.Second)))
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 {
		t.Fatalf("claimed %d, want 1", len(got))
	}
	for i := range 2 {
		const wait = 300 * time.Millisecond
		retryAt := time.Now().Add(wait)
		n, err := s.RecordOutgoingFailures(ctxT(t), []bus.OutgoingFailure{{ID: "failing", Token: got[0].Token,
			Error: fmt.Sprintf("boom %d", i+1), RetryAfter: wait, RetryAt: retryAt}})
		if err != nil || n != 1 {
			t.Fatalf("RecordOutgoingFailures = %d, %v; want 1, nil", n, err)
		}
		got = []bus.OutgoingMessage{waitClaim(t, s, time.Hour)}
		if time.Now().Before(retryAt.Add(-5 * time.Millisecond)) {
			t.Errorf("row claimed before its retry time %v", retryAt)
		}
		if got[0].Failures != i+1 || got[0].LastError != fmt.Sprintf("boom %d", i+1) {
			t.Errorf("after %d failures: Failures=%d LastError=%q", i+1, got[0].Failures, got[0].LastError)
		}
	}
	// Failures recorded for unknown rows are ignored.
	if n, err := s.RecordOutgoingFailures(ctxT(t), []bus.OutgoingFailure{{ID: "gone", Token: got[0].Token, Error: "x", RetryAt: time.Now()}}); err != nil || n != 0 {
		t.Errorf("RecordOutgoingFailures on an unknown row = %d, %v; want 0, nil", n, err)
	}
	mustDelete(t, s, got)
}

func testRelease(t *testing.T, s bus.ScheduledStore) {
	mustStore(t, s, row("released", time.Now().Add(-time.Second)))
	first := claim(t, s, 10, time.Hour)
	if len(first) != 1 {
		t.Fatalf("claimed %d, want 1", len(first))
	}
	n, err := s.ReleaseOutgoing(ctxT(t), []bus.Claim{first[0].Claim(), {ID: "unknown", Token: first[0].Token}})
	if err != nil || n != 1 {
		t.Fatalf("ReleaseOutgoing = %d, %v; want 1, nil", n, err)
	}
	got := claim(t, s, 10, time.Hour)
	if len(got) != 1 || got[0].Failures != 0 {
		t.Fatalf("after release claimed %+v, want the row with no failure counted", got)
	}
	mustDelete(t, s, got)
}

func testNextDue(t *testing.T, s bus.ScheduledStore) {
	if _, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport); err != nil || ok {
		t.Fatalf("NextDueOutgoing on an empty store = %v, %v; want false, nil", ok, err)
	}
	early := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	mustStore(t, s, row("later", early.Add(time.Hour)), row("early", early))
	next, ok, err := s.NextDueOutgoing(ctxT(t), suiteTransport)
	if err != nil || !ok || next.Sub(early).Abs() > time.Millisecond {
		t.Fatalf("NextDueOutgoing = %v, %v, %v; want %v", next, ok, err, early)
	}
	mustCancel(t, s, "early")
	next, ok, _ = s.NextDueOutgoing(ctxT(t), suiteTransport)
	if !ok || next.Sub(early.Add(time.Hour)).Abs() > time.Millisecond {
		t.Errorf("NextDueOutgoing after cancel = %v, %v; want %v", next, ok, early.Add(time.Hour))
	}
	mustCancel(t, s, "later")
}

func testNotEarly(t *testing.T, s bus.ScheduledStore) {
	const n = 200
	start := time.Now()
	mustStore(t, s, rows("ne", n, func(i int) time.Time { return start.Add(200*time.Millisecond + time.Duration(i)*5*time.Millisecond) })...)
	got := 0
	for got < n && time.Since(start) < time.Minute {
		batch := claim(t, s, 50, time.Hour)
		after := time.Now()
		for _, m := range batch {
			if m.DueAt.After(after) {
				t.Errorf("row %s claimed %v before it was due", m.ID, m.DueAt.Sub(after))
			}
		}
		got += len(batch)
		if len(batch) > 0 {
			mustDelete(t, s, batch)
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if got != n {
		t.Errorf("claimed %d rows, want %d", got, n)
	}
}

func testLargeBatch(t *testing.T, s bus.ScheduledStore) {
	const n = 10000
	now := time.Now()
	mustStore(t, s, rows("big", n, func(i int) time.Time { return now.Add(-time.Duration(n-i) * time.Microsecond) })...)
	seen := make(map[string]bool, n)
	var last time.Time
	for {
		got := claim(t, s, 1000, time.Hour)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			if seen[m.ID] {
				t.Fatalf("row %s claimed twice", m.ID)
			}
			if m.DueAt.Before(last) {
				t.Fatalf("row %s out of due order", m.ID)
			}
			last = m.DueAt
			seen[m.ID] = true
		}
		mustDelete(t, s, got)
	}
	if len(seen) != n {
		t.Errorf("claimed %d rows, want %d", len(seen), n)
	}
}

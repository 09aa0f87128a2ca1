package postgres_test

import (
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// TestSettleNamesRowsOfSeveralClaims settles rows of two claims (two
// tokens) in one call, with a claim whose token is stale among them: each
// row is matched with its own token, and the count says how many changed.
func TestSettleNamesRowsOfSeveralClaims(t *testing.T) {
	t.Parallel()
	p := newStore(t, testPool(t), postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	due := time.Now().Add(-time.Second)
	for _, id := range []string{"a1", "a2", "b1", "b2"} {
		store(t, p, ctx, id, due)
	}
	first, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 2, time.Hour)
	if err != nil || len(first) != 2 {
		t.Fatalf("first claim = %v, %v", first, err)
	}
	second, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 2, time.Hour)
	if err != nil || len(second) != 2 || second[0].Token == first[0].Token {
		t.Fatalf("second claim = %v, %v; want two rows under a new token", second, err)
	}
	stale := bus.Claim{ID: second[1].ID, Token: first[0].Token}
	failures := []bus.OutgoingFailure{
		{ID: first[1].ID, Token: first[1].Token, Error: "x", RetryAfter: time.Hour},
		{ID: second[0].ID, Token: second[0].Token, Error: "y", RetryAfter: time.Hour},
		{ID: stale.ID, Token: stale.Token, Error: "stale", RetryAfter: time.Hour},
	}
	if n, err := p.RecordOutgoingFailures(ctx, failures); err != nil || n != 2 {
		t.Fatalf("RecordOutgoingFailures = %d, %v; want 2 (the stale token changes nothing)", n, err)
	}
	if n, err := p.DeleteOutgoing(ctx, []bus.Claim{first[0].Claim(), second[1].Claim(), stale}); err != nil || n != 2 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 2", n, err)
	}
	// The rows whose failures were recorded are no longer leased.
	mustClear(t, p, first[1].ID, second[0].ID)
}

// TestStoreNowIsTheDatabaseClock checks StoreNow against the server's
// clock_timestamp().
func TestStoreNowIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	var before, after time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	now, err := p.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if now.Before(before) || now.After(after) {
		t.Errorf("StoreNow = %v, want between %v and %v", now, before, after)
	}
}

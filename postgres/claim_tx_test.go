package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// claimAppPool is appPool (MaxConns 4) with a unique application_name.
func claimAppPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	app := "pbclaim-" + strings.ToLower(bustest.Namespace())
	return appPool(t, app), app
}

// A claim whose connection is lost before its delete commits: the delete
// returns the error, and the rows, not deleted, are claimed again under
// the same IDs.
func TestClaimLostBeforeCommitReturnsTheError(t *testing.T) {
	t.Parallel()
	pool, app := claimAppPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	due := time.Now().Add(-time.Second)
	for _, id := range []string{"lost-a", "lost-b", "lost-c"} {
		store(t, p, ctx, id, due)
	}
	got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Minute)
	if err != nil || len(got) != 3 {
		t.Fatalf("claim = %d rows, %v; want 3", len(got), err)
	}
	var killed int
	err = testPool(t).QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'idle in transaction') k`, app).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the claim's session: %d, %v; want 1", killed, err)
	}
	n, err := p.DeleteOutgoing(ctx, claimsOf(got))
	if err == nil || !strings.HasPrefix(err.Error(), "postgres: delete outgoing") {
		t.Fatalf("DeleteOutgoing on a lost claim = %d, %v; want a wrapped error", n, err)
	}
	again, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Minute)
	if err != nil || !slices.Equal(ids(again), ids(got)) {
		t.Fatalf("claim after the loss = %v, %v; want the same rows %v", ids(again), err, ids(got))
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(again)); err != nil || n != 3 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 3, nil", n, err)
	}
}

// Open claims hold at most half the pool. A claim beyond joins the
// youngest open claim when it began less than a second ago: it returns its
// rows at once, under a token of its own, in that claim's transaction,
// which commits once every row of both is settled. Past that age it waits
// briefly for a slot, then returns no row (a dispatcher that waits for its
// claim before settling the rows it holds must not wait on itself).
// RollbackClaims ends the open claims and frees their rows at once. A
// claim that finds nothing holds no slot.
func TestOpenClaimsHoldAtMostHalfThePool(t *testing.T) {
	t.Parallel()
	pool, _ := claimAppPool(t)
	p := newStore(t, pool, postgres.Options{})
	t.Cleanup(p.RollbackClaims) // a failed test leaves none open
	ctx := ctxTimeout(t, time.Minute)
	for range 5 { // empty claims end at once
		if got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour); err != nil || len(got) != 0 {
			t.Fatalf("claim of an empty table = %v, %v", got, err)
		}
	}
	due := time.Now().Add(-time.Second)
	for _, id := range []string{"slot-a", "slot-b", "slot-c", "slot-d"} {
		store(t, p, ctx, id, due)
	}
	var held []bus.OutgoingMessage
	for range 2 {
		got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim = %v, %v; want one row", ids(got), err)
		}
		held = append(held, got...)
	}
	start := time.Now()
	joined, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour)
	if err != nil || len(joined) != 1 {
		t.Fatalf("a third claim on a pool of 4 = %v, %v; want one row, joined to the youngest open claim", ids(joined), err)
	}
	if waited := time.Since(start); waited >= 100*time.Millisecond {
		t.Errorf("the joined claim took %v: it waited for a slot", waited)
	}
	if slices.Contains(ids(held), joined[0].ID) {
		t.Fatalf("the joined claim returned %s, a row the open claims hold", joined[0].ID)
	}
	if joined[0].Token == held[1].Token {
		t.Fatal("the joined claim has the token of the claim it joined")
	}
	// The joined claim settles on its own token; the transaction commits
	// with the last row of both.
	if n, err := p.DeleteOutgoing(ctx, claimsOf(joined)); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing of the joined claim = %d, %v; want 1, nil", n, err)
	}
	time.Sleep(1100 * time.Millisecond) // the open claims are too old to join now
	start = time.Now()
	if got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("a claim while two claims over a second old are open = %v, %v; want no row", ids(got), err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the claim waited %v for a slot", waited)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.ClaimDueOutgoing(short, testTransport, time.Now(), 1, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a claim whose context ends while it waits for a slot = %v; want the context's error", err)
	}
	// The rest of the pool still serves other statements.
	if _, _, err := p.NextDueOutgoing(ctx, testTransport); err != nil {
		t.Fatal(err)
	}
	p.RollbackClaims()
	if n, err := p.DeleteOutgoing(ctx, claimsOf(held)); err != nil || n != 0 {
		t.Fatalf("DeleteOutgoing of rolled-back claims = %d, %v; want 0, nil", n, err)
	}
	// The joined claim's delete was rolled back with the claim it joined.
	got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Hour)
	if err != nil || len(got) != 4 {
		t.Fatalf("claim after RollbackClaims = %v, %v; want all 4 rows", ids(got), err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(got)); err != nil || n != 4 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 4, nil", n, err)
	}
}

func ids(msgs []bus.OutgoingMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

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

// Open claims hold at most half the pool: a claim beyond waits briefly for
// a slot, then returns no row (a dispatcher that waits for its claim before
// settling the rows it holds must not wait on itself); RollbackClaims ends
// the open claims and frees their rows at once. A claim that finds nothing
// holds no slot.
func TestOpenClaimsHoldAtMostHalfThePool(t *testing.T) {
	t.Parallel()
	pool, _ := claimAppPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	for range 5 { // empty claims end at once
		if got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour); err != nil || len(got) != 0 {
			t.Fatalf("claim of an empty table = %v, %v", got, err)
		}
	}
	due := time.Now().Add(-time.Second)
	for _, id := range []string{"slot-a", "slot-b", "slot-c"} {
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
	if got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 1, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("a third open claim on a pool of 4 = %v, %v; want no row while two claims are open", ids(got), err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the third claim waited %v for a slot", waited)
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
	got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Hour)
	if err != nil || len(got) != 3 {
		t.Fatalf("claim after RollbackClaims = %v, %v; want all 3 rows", ids(got), err)
	}
	if n, err := p.DeleteOutgoing(ctx, claimsOf(got)); err != nil || n != 3 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 3, nil", n, err)
	}
}

func ids(msgs []bus.OutgoingMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

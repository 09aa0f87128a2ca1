package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// TestClaimOfABatchProbesThePrimaryKeyOnce claims 500 rows of a fresh table
// of 5,000, not yet analyzed, as a dispatcher does right after the rows were
// stored, with the generic plan a prepared statement switches to (a claim
// sets plan_cache_mode to force_custom_plan for its transaction, but a
// generic plan must not be a disaster either). That plan guesses a handful
// of rows: the rows the claim locks must still be read through the ordered
// scan of the claim index, never the whole table, and never by a nested
// loop that probes the primary key for every row with the whole batch (the
// square of the batch in index probes: 250,000 for 500 rows).
func TestClaimOfABatchProbesThePrimaryKeyOnce(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	due := time.Now().Add(-time.Second)
	msgs := make([]bus.OutgoingMessage, 5000)
	for i := range msgs {
		msgs[i] = bus.OutgoingMessage{ID: fmt.Sprintf("row-%05d", i), Envelope: []byte("{}"),
			DueAt: due.Add(time.Duration(i) * time.Millisecond), Transport: testTransport}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A named prepared statement, run with EXECUTE, gets the generic plan
	// that "force_generic_plan" asks for.
	explainGeneric := func(sql string, args string) string {
		t.Helper()
		if _, err := conn.Exec(ctx, "PREPARE claim_plan AS "+sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("PREPARE: %v", err)
		}
		defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE claim_plan", pgx.QueryExecModeSimpleProtocol) }()
		return explain(t, conn, "force_generic_plan", "EXECUTE claim_plan("+args+")", pgx.QueryExecModeSimpleProtocol)
	}
	lease := time.Minute.Microseconds()
	plans := map[string]string{
		"claim":            explainGeneric(postgres.ClaimSQL(p), fmt.Sprintf("'%s', 500, %d", testTransport, lease)),
		"look-ahead claim": explainGeneric(postgres.AheadSQL(p), fmt.Sprintf("'%s', 500, %d, 1000", testTransport, lease)),
	}
	for name, plan := range plans {
		if !strings.Contains(plan, "$1") {
			t.Errorf("%s: not the generic plan:\n%s", name, plan)
		}
		if !strings.Contains(plan, "rows=500 ") {
			t.Errorf("%s did not lease 500 rows:\n%s", name, plan)
		}
		checkPrimaryKeyOnce(t, "generic plan", name, plan)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "outgoing_messages_claim_idx") {
			t.Errorf("%s: not the ordered scan of the claim index:\n%s", name, plan)
		}
	}
}

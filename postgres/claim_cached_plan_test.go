package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// TestClaimsOfABurstAfterAnIdleWhileReadNoWholeTable is the dispatcher of
// a service that polled its table for a while, empty or holding only rows
// due later, then met a burst: its claims and settlements must still find
// their rows through the indexes. PostgreSQL plans a prepared statement for
// its arguments five times, then may keep a generic plan for good, costed
// on the table as it was then: a sequential scan for the rows to lease.
// Kept for the burst, that plan reads the whole table for each batch (40
// claims of 500 rows from 20,000 rows: 4,400 rows a second through NATS
// instead of 15,000).
func TestClaimsOfABurstAfterAnIdleWhileReadNoWholeTable(t *testing.T) {
	t.Parallel()
	for _, later := range []int{0, 100} {
		t.Run(fmt.Sprintf("%d rows due later", later), func(t *testing.T) {
			t.Parallel()
			claimsAfterIdle(t, later)
		})
	}
}

func claimsAfterIdle(t *testing.T, later int) {
	// Two connections: a claim holds one in its transaction until its rows
	// are settled, the other runs the rest; every statement reuses its
	// plans on them.
	pool := newPool(t, 2)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, 2*time.Minute)
	// Settlements take a few rows, which the server finds through the
	// primary key whatever it makes of a table of this size (it may read
	// one this small from end to end for a whole batch).
	const idleCalls, burst, batch, settled = 10, 20000, 500, 20
	lease := time.Minute
	if later > 0 {
		rows := make([]bus.OutgoingMessage, later)
		for i := range rows {
			rows[i] = bus.OutgoingMessage{ID: fmt.Sprintf("later-%05d", i), Envelope: []byte("{}"), DueAt: time.Now().Add(time.Hour), Transport: testTransport}
		}
		if err := p.StoreOutgoing(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	gone := []bus.Claim{{ID: "gone", Token: "token"}}
	for range idleCalls { // an idle dispatcher's polls, and settlements of rows gone by now
		if _, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), batch, lease); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ClaimOutgoingAhead(ctx, testTransport, time.Now(), 250*time.Millisecond, batch, lease); err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.NextDueOutgoing(ctx, testTransport); err != nil {
			t.Fatal(err)
		}
		if _, err := p.DeleteOutgoing(ctx, gone); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ReleaseOutgoing(ctx, gone); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RecordOutgoingFailures(ctx, []bus.OutgoingFailure{{ID: "gone", Token: "token", Error: "x", RetryAfter: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.CancelOutgoing(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
	}
	due := time.Now().Add(-time.Second)
	msgs := make([]bus.OutgoingMessage, burst)
	for i := range msgs {
		msgs[i] = bus.OutgoingMessage{ID: fmt.Sprintf("burst-%05d", i), Envelope: []byte("{}"), DueAt: due, Transport: testTransport}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	reads := tableReads(t, pool, p)
	var claimed []bus.OutgoingMessage
	claim := func() error {
		var err error
		claimed, err = p.ClaimDueOutgoing(ctx, testTransport, time.Now(), batch, lease)
		if err == nil && len(claimed) != batch {
			err = fmt.Errorf("%d rows, want %d", len(claimed), batch)
		}
		return err
	}
	count := func(want int) func(int, error) error {
		return func(n int, err error) error {
			if err == nil && n != want {
				err = fmt.Errorf("%d rows, want %d", n, want)
			}
			return err
		}
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"claim", claim},
		{"delete", func() error { return count(settled)(p.DeleteOutgoing(ctx, claimsOf(claimed[:settled]))) }},
		// The claim's other rows go back, which ends its transaction.
		{"release the rest", func() error { return count(batch - settled)(p.ReleaseOutgoing(ctx, claimsOf(claimed[settled:]))) }},
		{"look-ahead claim", func() error {
			c, err := p.ClaimOutgoingAhead(ctx, testTransport, time.Now(), 250*time.Millisecond, batch, lease)
			claimed = c.Rows
			return count(batch)(len(c.Rows), err)
		}},
		{"release", func() error { return count(settled)(p.ReleaseOutgoing(ctx, claimsOf(claimed[:settled]))) }},
		{"release the rest", func() error { return count(batch - settled)(p.ReleaseOutgoing(ctx, claimsOf(claimed[settled:]))) }},
		{"claim again", claim},
		{"failures", func() error {
			failures := make([]bus.OutgoingFailure, settled)
			for i, m := range claimed[:settled] {
				failures[i] = bus.OutgoingFailure{ID: m.ID, Token: m.Token, Error: "refused", RetryAfter: time.Hour}
			}
			return count(settled)(p.RecordOutgoingFailures(ctx, failures))
		}},
		{"release the rest", func() error { return count(batch - settled)(p.ReleaseOutgoing(ctx, claimsOf(claimed[settled:]))) }},
		{"cancel", func() error {
			ok, err := p.CancelOutgoing(ctx, msgs[burst-1].ID)
			if err == nil && !ok {
				err = errors.New("not cancelled")
			}
			return err
		}},
		{"next due", func() error {
			_, ok, err := p.NextDueOutgoing(ctx, testTransport)
			if err == nil && !ok {
				err = errors.New("no next due time with rows due")
			}
			return err
		}},
	}
	for _, s := range steps {
		before := reads()
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if read := reads() - before; read >= burst/2 {
			t.Errorf("%s after %d idle polls read %d rows of %d",
				s.name, idleCalls, read, burst+later)
		}
	}
}

func claimsOf(rows []bus.OutgoingMessage) []bus.Claim {
	claims := make([]bus.Claim, len(rows))
	for i, m := range rows {
		claims[i] = bus.Claim{ID: m.ID, Token: m.Token}
	}
	return claims
}

// tableReads returns a function that reads how many rows of p's table
// scans have read so far: sequential scans, and index scans' fetches from
// the table. It publishes the statistics the pool's one connection holds
// back first (pg_stat_force_next_flush, PostgreSQL 15); it skips the test
// on an older server.
func tableReads(t *testing.T, pool *pgxpool.Pool, p *postgres.Persistence) func() int64 {
	t.Helper()
	ctx := t.Context()
	return func() int64 {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42883" { // undefined_function
				t.Skip("the server cannot publish its table statistics on demand (PostgreSQL 15 can)")
			}
			t.Fatal(err)
		}
		var read int64
		err := pool.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
	FROM pg_stat_user_tables WHERE relid = to_regclass($1)`, p.Table()).Scan(&read)
		if err != nil {
			t.Fatal(err)
		}
		return read
	}
}

package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// insertCounter is a pgx tracer counting the INSERT statements sent.
type insertCounter struct{ n atomic.Int64 }

func (c *insertCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "INSERT") || strings.HasPrefix(d.SQL, "WITH ins") {
		c.n.Add(1)
	}
	return ctx
}

func (c *insertCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestConcurrentStoresAreGrouped(t *testing.T) {
	t.Parallel()
	testPool(t) // skips when the server is down
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	counter := &insertCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)

	store(t, p, ctx, "lone", time.Now().Add(time.Hour))
	if n := counter.n.Load(); n != 1 {
		t.Fatalf("a lone call took %d INSERTs, want 1", n)
	}
	const senders, each = 64, 20
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("g-%02d-%02d", s, i)
				if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{outgoing(id, time.Now().Add(time.Hour))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+p.Table()).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	inserts := counter.n.Load() - 1
	t.Logf("%d calls from %d goroutines took %d INSERTs (%.1f rows each)", senders*each, senders, inserts, float64(senders*each)/float64(inserts))
	if rows != senders*each+1 {
		t.Errorf("%d rows stored, want %d", rows, senders*each+1)
	}
	if inserts >= senders*each/2 {
		t.Errorf("%d INSERTs for %d concurrent calls: calls were not grouped", inserts, senders*each)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+p.Table()); err != nil {
		t.Fatal(err)
	}
}

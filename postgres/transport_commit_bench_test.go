package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkTransportRawGroupCommitCeiling is BenchmarkTransportRawClientCeiling
// with a group commit of pgx alone instead of a transaction per row: the 8
// goroutines hand their 1 KiB row to one committing goroutine and wait;
// it takes every row waiting (up to 500), inserts them in one statement
// (one transaction, one commit) and releases their senders, while the rows
// arriving meanwhile wait for the next commit. The consumer is the same
// bare claim-and-delete loop.
//
//	cd postgres && go test -run '^$' -bench 'Transport(SendToHandler|Raw)' -benchtime 20000x
func BenchmarkTransportRawGroupCommitCeiling(b *testing.B) {
	pool := newPool(b, 24)
	table := rawQueueTable(b, pool)
	ctx := b.Context()
	insert := `INSERT INTO ` + table + ` (queue, body) SELECT 'q', x FROM unnest($1::bytea[]) AS x`
	requests := make(chan chan error, benchSenders)
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		for first := range requests {
			group := []chan error{first}
		more:
			for len(group) < 500 {
				select {
				case r, ok := <-requests:
					if !ok {
						break more
					}
					group = append(group, r)
				default:
					break more
				}
			}
			bodies := make([][]byte, len(group))
			for i := range bodies {
				bodies[i] = benchBody
			}
			_, err := pool.Exec(ctx, insert, bodies)
			for _, r := range group {
				r <- err
			}
		}
	}()
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	consumed := make(chan error, 1)
	go func() { consumed <- rawConsume(ctx, pool, table, b.N) }()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchSenders {
		wg.Go(func() {
			done := make(chan error, 1)
			for next.Add(1) <= int64(b.N) {
				requests <- done
				if err := <-done; err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(requests)
	<-committed
	if err := <-consumed; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// rawQueueTable creates the bare queue table of the raw benchmarks in a
// fresh schema and returns its quoted name.
func rawQueueTable(b *testing.B, pool *pgxpool.Pool) string {
	schema := freshSchema(b, pool)
	table := pgx.Identifier{schema, "raw"}.Sanitize()
	for _, ddl := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE ` + table + ` (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL,
			body bytea NOT NULL, available_at timestamptz NOT NULL DEFAULT now(), lease_token bigint)`,
		`CREATE INDEX ON ` + table + ` (queue, available_at, seq)`,
	} {
		if _, err := pool.Exec(b.Context(), ddl); err != nil {
			b.Fatal(err)
		}
	}
	return table
}

// rawConsume claims up to 16 rows of queue 'q' at a time with FOR UPDATE
// SKIP LOCKED under a lease and deletes them, both with an asynchronous
// commit, polling without pause, until it has consumed n rows.
func rawConsume(ctx context.Context, pool *pgxpool.Pool, table string, n int) error {
	const async = `(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`
	claim := `WITH c AS (SELECT seq FROM ` + table + ` WHERE queue = 'q' AND available_at <= now() AND ` + async + `
		ORDER BY available_at, seq LIMIT 16 FOR UPDATE SKIP LOCKED)
		UPDATE ` + table + ` r SET available_at = now() + interval '30 s', lease_token = 1 FROM c WHERE r.seq = c.seq RETURNING r.seq, r.body`
	del := `DELETE FROM ` + table + ` WHERE seq = ANY($1) AND lease_token = 1 AND ` + async
	for got := 0; got < n; {
		rows, err := pool.Query(ctx, claim)
		if err != nil {
			return err
		}
		seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
			var seq int64
			var body []byte
			return seq, r.Scan(&seq, &body)
		})
		if err != nil {
			return err
		}
		if len(seqs) == 0 {
			continue
		}
		if _, err := pool.Exec(ctx, del, seqs); err != nil {
			return err
		}
		got += len(seqs)
	}
	return nil
}

package postgres_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

const benchSenders = 8

var benchBody = []byte(`{"Pad":"` + strings.Repeat("x", 1014) + `"}`)

// BenchmarkTransportSendToHandler measures the transport alone: 8
// goroutines Send 1 KiB messages to one queue, each waiting for its commit,
// and one Receive with Concurrency 8 acknowledges them. It also reports
// the statements the transport ran per message, by kind: each is a round
// trip, and round trips cost the process most of its CPU (socket reads and
// writes, goroutine wake-ups). Fewer per message means more messages shared
// each insert, claim or acknowledgement.
func BenchmarkTransportSendToHandler(b *testing.B) {
	stmts := &statementCounter{}
	pool := tracedPool(b, 24, stmts)
	tr := newTransport(b, pool, freshSchema(b, pool), postgres.TransportOptions{})
	queue := bustest.Namespace()
	if err := tr.Provision(b.Context(), bus.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		_ = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 8}, func(context.Context, *bus.Envelope) error {
			if got.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		})
	}()
	defer func() { cancel(); <-recvDone }()
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	stmts.start(b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchSenders {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				env := &bus.Envelope{ID: "m", Type: "bench.Tick", Kind: bus.KindCommand, Body: benchBody,
					ContentType: "application/json", Destination: queue, SentAt: time.Now()}
				if err := tr.Send(ctx, queue, env); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	stmts.report(b)
}

// BenchmarkTransportRawClientCeiling does the same work with pgx alone, no
// Postbus code: 8 goroutines each INSERT a 1 KiB row and wait for the
// commit; one consumer claims up to 16 rows at a time with FOR UPDATE SKIP
// LOCKED under a lease and deletes them once handled (claims and deletes
// without waiting for the WAL flush, as the transport does), polling
// without pause when the queue is empty.
func BenchmarkTransportRawClientCeiling(b *testing.B) {
	pool := newPool(b, 24)
	schema := freshSchema(b, pool)
	table := pgx.Identifier{schema, "raw"}.Sanitize()
	ctx := b.Context()
	for _, ddl := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE ` + table + ` (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL,
			body bytea NOT NULL, available_at timestamptz NOT NULL DEFAULT now(), lease_token bigint)`,
		`CREATE INDEX ON ` + table + ` (queue, available_at, seq)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			b.Fatal(err)
		}
	}
	claim := `WITH c AS (SELECT seq FROM ` + table + ` WHERE queue = 'q' AND available_at <= now()
		AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
		ORDER BY available_at, seq LIMIT 16 FOR UPDATE SKIP LOCKED)
		UPDATE ` + table + ` r SET available_at = now() + interval '30 s', lease_token = 1 FROM c WHERE r.seq = c.seq RETURNING r.seq, r.body`
	del := `DELETE FROM ` + table + ` WHERE seq = ANY($1) AND lease_token = 1
		AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	recvDone := make(chan error, 1)
	go func() {
		n := 0
		for n < b.N {
			rows, err := pool.Query(ctx, claim)
			if err != nil {
				recvDone <- err
				return
			}
			var seqs []int64
			for rows.Next() {
				var s int64
				var body []byte
				if err := rows.Scan(&s, &body); err != nil {
					recvDone <- err
					return
				}
				seqs = append(seqs, s)
			}
			if len(seqs) == 0 {
				continue
			}
			if _, err := pool.Exec(ctx, del, seqs); err != nil {
				recvDone <- err
				return
			}
			n += len(seqs)
		}
		recvDone <- nil
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchSenders {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (queue, body) VALUES ('q', $1)`, benchBody); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := <-recvDone; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// statementCounter is a pgx tracer counting the transport's statements by
// kind, from start on.
type statementCounter struct {
	on                                    atomic.Bool
	n                                     int
	inserts, notifies, claims, acks, rest atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !c.on.Load() {
		return ctx
	}
	switch sql := d.SQL; {
	case strings.HasPrefix(sql, "WITH u AS"):
		c.inserts.Add(1)
	case strings.Contains(sql, "pg_notify"):
		c.notifies.Add(1)
	case strings.HasPrefix(sql, "WITH c AS") && strings.Contains(sql, "SKIP LOCKED"):
		c.claims.Add(1)
	case strings.HasPrefix(sql, "DELETE"):
		c.acks.Add(1)
	default:
		c.rest.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) start(n int) {
	c.n = n
	c.on.Store(true)
}

// report adds the statements per message to b's metrics.
func (c *statementCounter) report(b *testing.B) {
	c.on.Store(false)
	per := func(v *atomic.Int64) float64 { return float64(v.Load()) / float64(c.n) }
	b.ReportMetric(per(&c.inserts), "inserts/msg")
	b.ReportMetric(per(&c.notifies), "notifies/msg")
	b.ReportMetric(per(&c.claims), "claims/msg")
	b.ReportMetric(per(&c.acks), "acks/msg")
	b.ReportMetric(per(&c.rest), "other-stmts/msg")
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Ticked is the event the throughput handler publishes on PostgreSQL, one
// per Tick handled: the Tick's sequence number and the time the handler
// finished its work, just before its commit.
type Ticked struct {
	Seq    int64
	DoneAt int64 // Unix nanoseconds
}

// business is the work of the throughput handler on PostgreSQL: one INSERT
// into a table of the run's schema and one Ticked event. With -outbox the
// INSERT goes through the handling's transaction (postgres.Tx) and the
// event is stored with it; without, the INSERT autocommits on the pool and
// the event is published at once. Both runs do the same work.
type business struct {
	pool   *pgxpool.Pool
	table  string // quoted, schema-qualified
	insert string
	outbox bool
}

// newBusiness creates the run's business table.
func newBusiness(ctx context.Context, s *stage) (*business, error) {
	pool := s.o.pgPool
	if pool == nil {
		return nil, errors.New("no PostgreSQL pool for the business table")
	}
	schema := pgx.Identifier{postgresSchema(s.run)}.Sanitize()
	table := pgx.Identifier{postgresSchema(s.run), "orders"}.Sanitize()
	for _, q := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + schema,
		"CREATE TABLE IF NOT EXISTS " + table + " (seq bigint PRIMARY KEY, message_id text NOT NULL, body text NOT NULL)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("business table: %w", err)
		}
	}
	return &business{
		pool: pool, table: table, outbox: s.o.outbox,
		// ON CONFLICT: a redelivery without the outbox shows up as a
		// duplicate receipt, not as a handler failing for ever.
		insert: "INSERT INTO " + table + " (seq, message_id, body) VALUES ($1, $2, $3) ON CONFLICT (seq) DO NOTHING",
	}, nil
}

// handle does the business work of Tick m, message id, on bus b.
func (w *business) handle(ctx context.Context, b *bus.Bus, m Tick, id string) error {
	var err error
	if w.outbox {
		tx, ok := postgres.Tx(ctx)
		if !ok {
			return errors.New("business: no outbox transaction in the handler's context")
		}
		_, err = tx.Exec(ctx, w.insert, m.Seq, id, m.Pad)
	} else {
		_, err = w.pool.Exec(ctx, w.insert, m.Seq, id, m.Pad)
	}
	if err != nil {
		return fmt.Errorf("business: insert %d: %w", m.Seq, err)
	}
	return b.Publish(ctx, Ticked{Seq: m.Seq, DoneAt: time.Now().UnixNano()})
}

// rows counts the business rows written.
func (w *business) rows(ctx context.Context) (int, error) {
	var n int
	err := w.pool.QueryRow(ctx, "SELECT count(*) FROM "+w.table).Scan(&n)
	return n, err
}

// startReceiver starts the endpoint that subscribes to Ticked, on the
// stage's transport, recording each event into events with its lateness
// from the handler's DoneAt: the commit→receipt time.
func (s *stage) startReceiver(ctx context.Context, events *tracker) (*bus.Bus, error) {
	b, err := bus.New(bus.Config{
		Endpoint: s.endpoint + "-events", Transport: s.transport, Persistence: s.persistence,
		ErrorQueue: s.endpoint + "-error", DeadLetterQueue: s.endpoint + "-deadletter",
		Logger: s.logger, Concurrency: s.o.concurrency,
	})
	if err != nil {
		return nil, err
	}
	err = bus.Handle(b, func(ctx context.Context, e Ticked) error {
		now := time.Now()
		events.record(e.Seq, bus.IncomingMessage(ctx).ID, now, now.Sub(time.Unix(0, e.DoneAt)))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// finishBusiness waits for the events, then reports them, the
// commit→receipt percentiles and the business rows into r.
func (s *stage) finishBusiness(ctx context.Context, w *business, events *tracker, r *Result) error {
	if err := await(ctx, events, time.Now().Add(s.o.timeout)); err != nil {
		return err
	}
	time.Sleep(duplicateGrace)
	e := events.tally()
	r.Events = e.Received
	r.CommitToReceipt = percentiles(e.Lateness)
	r.applyTally(e)
	rows, err := w.rows(ctx)
	if err != nil {
		return fmt.Errorf("count business rows: %w", err)
	}
	r.BusinessRows = &rows
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// postgresDriver stores each run in a fresh schema, bench_<run>, dropped
// by the owner at the end.
func postgresDriver() persistenceDriver {
	return persistenceDriver{
		shared:      true,
		storeCost:   200 * time.Microsecond,
		serverProcs: []string{"postgres"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error) {
			pool, err := openPool(ctx, o, run)
			if err != nil {
				return nil, nil, fmt.Errorf("connect: %w", err)
			}
			if err := pool.Ping(ctx); err != nil {
				pool.Close()
				return nil, nil, fmt.Errorf("connect %s: %w", o.postgresURL, err)
			}
			if owner {
				o.pgPool = pool
			}
			schema := postgresSchema(run)
			p, err := postgres.New(pool, postgres.Options{Schema: schema, Logger: o.logger, DisableNotify: o.postgresNoNotify})
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			cleanup := func() {
				if owner {
					cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if _, err := pool.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
						o.logger.Error("cannot drop the run's schema", "schema", schema, "error", err)
					}
				}
				pool.Close()
			}
			return p, cleanup, nil
		},
		sessionPIDs: postgresSessionPIDs,
		logPosition: postgresWALPosition,
		runLogBytes: postgresRunWAL,
		idleQueries: func(ctx context.Context, o *options) (int64, error) {
			// Scans of the run's own table: every claim and next-due query
			// reads it, and other databases' traffic does not count.
			if err := flushPoolStats(ctx, o.pgPool); err != nil {
				return 0, err
			}
			conn, err := pgx.Connect(ctx, o.postgresURL)
			if err != nil {
				return 0, err
			}
			defer conn.Close(ctx)
			var n int64
			err = conn.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::bigint
				FROM pg_stat_user_tables WHERE schemaname = $1`, postgresSchema(o.run)).Scan(&n)
			return n, err
		},
	}
}

func postgresSchema(run string) string { return "bench_" + run }

// flushPoolStats makes the idle connections of pool publish the table
// statistics they hold back. A backend publishes its counters at most once
// a second, and one that falls idle keeps the rest for up to ten seconds:
// read right after scheduling, the counters would miss the last second of
// the INSERTs (each row's ON CONFLICT check counts an index scan), and the
// next reading, in the middle of an idle window, would charge those scans
// to the idle dispatcher, the more the larger the backlog just stored.
// pg_stat_force_next_flush (PostgreSQL 15) makes the statement's own end
// publish them; an older server has none, and its figures stay approximate.
func flushPoolStats(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return nil
	}
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		if _, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42883" { // undefined_function
				return nil
			}
			return fmt.Errorf("flush table statistics: %w", err)
		}
	}
	return nil
}

// postgresSessionPIDs returns the server processes of the run's sessions,
// in every process of the run.
func postgresSessionPIDs(ctx context.Context, o *options) ([]int, error) {
	conn, err := pgx.Connect(ctx, o.postgresURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, postgresSchema(o.run))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// openPool connects to o.postgresURL, naming its sessions after the run
// (application_name), so that their server processes can be told apart
// from other clients' (sessionPIDs). The throughput workload's handlers
// each hold a connection for their handling (the outbox transaction, or the
// business INSERT), so its pool is sized above -concurrency, with room for
// the dispatcher and sends, whether or not -outbox is on.
func openPool(ctx context.Context, o *options, run string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(o.postgresURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = postgresSchema(run)
	if o.workload == "throughput" {
		cfg.MaxConns = max(cfg.MaxConns, int32(o.concurrency)+4)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

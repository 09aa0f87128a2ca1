package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// postgresTransportDriver keeps each run's queues in a schema of its own,
// bench_<run>_transport, dropped by the owner at the end.
func postgresTransportDriver() transportDriver {
	return transportDriver{
		shared:      true,
		serverProcs: []string{"postgres"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			cfg, err := pgxpool.ParseConfig(o.postgresURL)
			if err != nil {
				return nil, nil, err
			}
			// Claims, grouped sends and acknowledgements, the LISTEN
			// connection and lease extensions.
			cfg.MaxConns = max(cfg.MaxConns, int32(o.concurrency)+8)
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err == nil {
				err = pool.Ping(ctx)
			}
			if err != nil {
				if pool != nil {
					pool.Close()
				}
				return nil, nil, fmt.Errorf("connect %s: %w", o.postgresURL, err)
			}
			schema := postgresSchema(run) + "_transport"
			t, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: schema, Logger: o.logger,
				DisableNotify: o.postgresNoNotify})
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			cleanup := func() {
				if owner {
					cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if _, err := pool.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
						o.logger.Error("cannot drop the run's transport schema", "schema", schema, "error", err)
					}
				}
				pool.Close()
			}
			return t, cleanup, nil
		},
	}
}

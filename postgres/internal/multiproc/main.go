// Command multiproc is the worker of the postgres package's multi-process
// and claim failover tests (storetest.RunWorker). It is built and started
// by TestMultiProcess and TestClaimFailover; it is not a tool.
//
//	multiproc -space SCHEMA -name p1 [-lease 3s] [-lookahead 2s] [-hang-after N]
//
// Its bus claims from SCHEMA.outgoing_messages, logs every claim in
// SCHEMA.claims and records every receipt in SCHEMA.receipts.
package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

func main() { storetest.WorkerMain(open) }

func open(ctx context.Context, spec storetest.WorkerSpec, log *slog.Logger) (storetest.WorkerStore, error) {
	url := drivertest.Addr("POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	storePool, err := openPool(ctx, url, 6, false)
	if err != nil {
		return storetest.WorkerStore{}, err
	}
	recPool, err := openPool(ctx, url, 10, true)
	if err != nil {
		storePool.Close()
		return storetest.WorkerStore{}, err
	}
	closeAll := func() { recPool.Close(); storePool.Close() }
	p, err := postgres.New(storePool, postgres.Options{Schema: spec.Space, Logger: log})
	if err != nil {
		closeAll()
		return storetest.WorkerStore{}, err
	}
	receipts := pgx.Identifier{spec.Space, "receipts"}.Sanitize()
	claims := pgx.Identifier{spec.Space, "claims"}.Sanitize()
	logClaims := func(ctx context.Context, ids []string) error {
		_, err := recPool.Exec(ctx, `INSERT INTO `+claims+` (msg_id, proc) SELECT unnest($1::text[]), $2`, ids, spec.Name)
		return err
	}
	return storetest.WorkerStore{Persistence: &claimLog{Persistence: p, log: logClaims},
		Record: func(ctx context.Context, r storetest.Receipt) error {
			_, err := recPool.Exec(ctx, `INSERT INTO `+receipts+` (msg_id, n, proc, due_at, received_at)
				VALUES ($1, $2, $3, $4, clock_timestamp())`, r.ID, r.N, r.Proc, r.Due)
			return err
		},
		Close: closeAll,
	}, nil
}

func openPool(ctx context.Context, url string, maxConns int32, asyncCommit bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if asyncCommit {
		// Receipts only need to be visible to the test, not to survive a
		// server crash.
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

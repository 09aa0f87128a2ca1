package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// outboxSchemaEnv tells the crash case's child which schema holds its store
// and business table.
const outboxSchemaEnv = "POSTBUS_PGOUTBOX_SCHEMA"

// callerTxKey carries the harness's caller transaction next to WithTx, so
// that Insert can write in it.
type callerTxKey struct{}

// businessInsert writes a business row in the transaction ctx carries: the
// handling's (postgres.Tx) or the harness's caller transaction.
func businessInsert(schema string) func(ctx context.Context, key string) error {
	table := pgx.Identifier{schema, "business"}.Sanitize()
	return func(ctx context.Context, key string) error {
		tx, ok := postgres.Tx(ctx)
		if !ok {
			tx, ok = ctx.Value(callerTxKey{}).(pgx.Tx)
		}
		if !ok {
			return errors.New("no transaction in ctx")
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+table+`(key) VALUES($1)`, key)
		return err
	}
}

func schemaOf(p *postgres.Persistence) string {
	return strings.Trim(strings.Split(p.Table(), ".")[0], `"`)
}

func outboxHarness(t *testing.T, pool *pgxpool.Pool) bustest.OutboxHarness {
	store := newStore(t, pool, postgres.Options{})
	schema := schemaOf(store)
	table := pgx.Identifier{schema, "business"}.Sanitize()
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+table+` (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return bustest.OutboxHarness{
		Store:  store,
		Insert: businessInsert(schema),
		Count: func(ctx context.Context, key string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE key = $1`, key).Scan(&n)
			return n, err
		},
		Begin: func(ctx context.Context) (context.Context, func() error, func() error, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			txCtx := postgres.WithTx(context.WithValue(ctx, callerTxKey{}, tx), tx)
			return txCtx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }, nil
		},
		Crash: func(t *testing.T, args bustest.OutboxChildArgs) {
			bustest.CrashOutboxChild(t, args, outboxSchemaEnv+"="+schema, "POSTBUS_TEST_POSTGRES_URL="+testURL())
		},
	}
}

// runOutboxChild is the crash case's child, run from TestMain: it never
// returns.
func runOutboxChild(args bustest.OutboxChildArgs) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "outbox child:", err)
		os.Exit(2)
	}
	schema := os.Getenv(outboxSchemaEnv)
	pool, err := openPool(context.Background(), 4)
	if err != nil {
		fail(err)
	}
	store, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		fail(err)
	}
	bustest.RunOutboxChild(store, businessInsert(schema), args)
}

// storedRows reports whether the store holds any row of any transport.
func storedRows(t *testing.T, pool *pgxpool.Pool, p *postgres.Persistence) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+p.Table()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWithTxFromAnotherDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = "postgres"
	cfg.MaxConns = 2
	other, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace(), Transport: tr, Persistence: store,
		Outbox: bus.OutboxConfig{Enabled: true}}, nil)
	ctx := ctxTimeout(t, time.Minute)
	tx, err := other.Begin(ctx)
	if err != nil {
		serverUnavailable(t, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = b.Send(postgres.WithTx(ctx, tx), bustest.PlaceOutboxOrder{Key: "elsewhere"}, bus.To("orders"))
	var dbErr *postgres.OtherDatabaseError
	if !errors.As(err, &dbErr) || !errors.Is(err, postgres.ErrOtherDatabase) {
		t.Fatalf("Send in a transaction on another database = %v; want *OtherDatabaseError", err)
	}
	if !strings.Contains(err.Error(), `"postgres"`) || !strings.Contains(err.Error(), `"test"`) {
		t.Errorf("the error does not name both databases: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedRows(t, pool, store); n != 0 {
		t.Errorf("%d rows stored after the refusal", n)
	}
}

// TestWithTxOnTheSameDatabaseByAnotherHostName: a pool whose configuration
// names the server differently is recognised as the same database.
func TestWithTxOnTheSameDatabaseByAnotherHostName(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.Host != "127.0.0.1" {
		bustest.SkipOutsideCI(t, "the test server is %s, not 127.0.0.1", cfg.ConnConfig.Host)
		return
	}
	cfg.ConnConfig.Host = "localhost"
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 2
	ctx := ctxTimeout(t, time.Minute)
	alias, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(alias.Close)
	tx, err := alias.Begin(ctx)
	if err != nil {
		bustest.SkipOutsideCI(t, "the server is not reachable as localhost: %v", err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	row := bus.OutgoingMessage{ID: "same-db", Kind: bus.KindCommand, Envelope: []byte("x"), Delay: time.Nanosecond}
	stored, err := store.StoreOutgoingInCallerTx(postgres.WithTx(ctx, tx), []bus.OutgoingMessage{row})
	if err != nil || !stored {
		t.Fatalf("StoreOutgoingInCallerTx = %v, %v; want stored", stored, err)
	}
	if n := storedRows(t, pool, store); n != 0 {
		t.Errorf("%d rows visible before the caller's commit", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storedRows(t, pool, store); n != 1 {
		t.Errorf("%d rows after the caller's commit, want 1", n)
	}
}

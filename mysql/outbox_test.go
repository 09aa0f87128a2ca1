package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mysql"
)

// outboxTableEnv names the store's table in the outbox crash case's child.
const outboxTableEnv = "POSTBUS_MYSQL_TEST_OUTBOX_TABLE"

// businessTable is the table of the harness's business rows, beside the
// store's.
func businessTable(table string) string { return "`" + table + "_business`" }

// outboxHarness sets up a fresh store and a business table of its own.
func outboxHarness(t *testing.T, db *sql.DB) bustest.OutboxHarness {
	table := freshTable()
	p := newStore(t, db, mysql.Options{Table: table})
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE "+businessTable(table)+" (k VARCHAR(200) NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatalf("create the business table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+businessTable(table)) })
	return bustest.OutboxHarness{
		Store:  p,
		Insert: insertBusiness(table),
		Count: func(ctx context.Context, key string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+businessTable(table)+" WHERE k = ?", key).Scan(&n)
			return n, err
		},
		Begin: func(ctx context.Context) (context.Context, func() error, func() error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return mysql.WithTx(ctx, tx), tx.Commit, tx.Rollback, nil
		},
		Crash: func(t *testing.T, args bustest.OutboxChildArgs) {
			bustest.CrashOutboxChild(t, args, outboxTableEnv+"="+table)
		},
	}
}

// insertBusiness writes a business row in the transaction ctx carries.
func insertBusiness(table string) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		tx, ok := mysql.Tx(ctx)
		if !ok {
			return errors.New("no transaction in ctx")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+businessTable(table)+" (k) VALUES (?)", key)
		return err
	}
}

// runOutboxChildIfAsked is the crash case's child: it never returns when
// this process is one.
func runOutboxChildIfAsked() {
	args, ok := bustest.OutboxChild()
	if !ok {
		return
	}
	db, err := openDB(context.Background(), testDSN(), 8)
	var p *mysql.Persistence
	if err == nil {
		p, err = mysql.New(db, mysql.Options{Table: os.Getenv(outboxTableEnv)})
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	bustest.RunOutboxChild(p, insertBusiness(os.Getenv(outboxTableEnv)), args)
}

// A pool too small for the outbox's handlings and the dispatcher is
// refused at Start, naming the numbers; one that fits starts.
func TestOutboxPoolTooSmallIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	p := newStore(t, db, mysql.Options{})
	b, err := bus.New(bus.Config{Endpoint: "pool-" + bustest.Namespace(), Persistence: p, Concurrency: 8,
		Outbox: bus.OutboxConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start(t.Context())
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "MaxConns 4") {
		_ = b.Stop(context.Background())
		t.Fatalf("Start with a pool of 4 for Concurrency 8 = %v; want a *bus.ConfigError naming MaxConns 4", err)
	}
	bustest.StartBus(t, bus.Config{Endpoint: "pool-" + bustest.Namespace(), Persistence: p, Concurrency: 3,
		Outbox: bus.OutboxConfig{Enabled: true}}, nil)
}

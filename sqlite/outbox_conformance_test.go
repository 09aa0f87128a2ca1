package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// outboxFileEnv names the database file of the outbox crash case's child.
const outboxFileEnv = "POSTBUS_SQLITE_TEST_OUTBOX_FILE"

// businessTable is the table the outbox harness writes business rows to,
// in the store's own file.
const businessTable = "CREATE TABLE IF NOT EXISTS business (key TEXT NOT NULL)"

// outboxHarness opens a fresh store on a file of its own, with the
// business table in the same file.
func outboxHarness(t *testing.T) bustest.OutboxHarness {
	path := filepath.Join(t.TempDir(), "outbox.db")
	p := openAt(t, path, sqlite.Options{})
	if _, err := p.DB().ExecContext(t.Context(), businessTable); err != nil {
		t.Fatalf("create the business table: %v", err)
	}
	return bustest.OutboxHarness{
		Store:  p,
		Insert: insertBusiness,
		Count: func(ctx context.Context, key string) (int, error) {
			var n int
			err := p.DB().QueryRowContext(ctx, "SELECT count(*) FROM business WHERE key = ?", key).Scan(&n)
			return n, err
		},
		Begin: func(ctx context.Context) (context.Context, func() error, func() error, error) {
			tx, err := p.DB().BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return sqlite.WithTx(ctx, tx), tx.Commit, tx.Rollback, nil
		},
		Crash: func(t *testing.T, args bustest.OutboxChildArgs) {
			bustest.CrashOutboxChild(t, args, outboxFileEnv+"="+path)
		},
	}
}

// insertBusiness writes a business row in the transaction ctx carries.
func insertBusiness(ctx context.Context, key string) error {
	tx, ok := sqlite.Tx(ctx)
	if !ok {
		return errors.New("no transaction in ctx")
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO business (key) VALUES (?)", key)
	return err
}

// runOutboxChildIfAsked is the crash case's child: it never returns when
// this process is one, and returns false otherwise.
func runOutboxChildIfAsked() bool {
	args, ok := bustest.OutboxChild()
	if !ok {
		return false
	}
	p, err := sqlite.Open(os.Getenv(outboxFileEnv), sqlite.Options{BusyTimeout: time.Minute})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	bustest.RunOutboxChild(p, insertBusiness, args)
	return true
}

package main

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/mysql"
)

const defaultMySQLURL = "root@tcp(127.0.0.1:3306)/test"

func mysqlURL() string {
	if u := os.Getenv("POSTBUS_TEST_MYSQL_DSN"); u != "" {
		return u
	}
	return defaultMySQLURL
}

// mysqlFixture sets up fresh tables with the fixture, and returns the
// environment that points the command at them.
func mysqlFixture(t *testing.T) (*mysql.Persistence, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := mysqlURL()
	db, err := sql.Open("mysql", url)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		bustest.SkipOutsideCI(t, "MariaDB/MySQL not reachable at %s (set POSTBUS_TEST_MYSQL_DSN): %v", driver.Redact(url), err)
	}
	table := "cli_" + bustest.Namespace()
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range []string{"", "_inbox", "_sagas", "_failed", "_recurring", "_runs"} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+table+s+"`")
		}
		_ = db.Close()
	})
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	seed(t, p)
	return p, map[string]string{"POSTBUS_MYSQL_URL": url, "POSTBUS_MYSQL_TABLE": table}
}

func TestGoldenMySQL(t *testing.T) {
	t.Parallel()
	p, env := mysqlFixture(t)
	checkGolden(t, openBackends, env, p)
}

func TestChangesMySQL(t *testing.T) {
	t.Parallel()
	p, env := mysqlFixture(t)
	ctx := context.Background()
	r := runApp(t, openBackends, env, "scheduled", "cancel", "0190f5d6-0000-7000-8000-000000000000")
	if r.code != exitOK || r.stdout != "cancelled 1 of 1 message(s)\n" {
		t.Fatalf("cancel: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, ok, err := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000000"); err != nil || ok {
		t.Fatalf("after cancel the row is still there: %v %v", ok, err)
	}
	r = runApp(t, openBackends, env, "scheduled", "send-now", "0190f5d6-0000-7000-8000-000000000001")
	if r.code != exitOK || r.stdout != "made due now 1 of 1 message(s)\n" {
		t.Fatalf("send-now: %d %q %q", r.code, r.stdout, r.stderr)
	}
	m, ok, err := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000001")
	if err != nil || !ok || m.DueAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("send-now: %v %v due %v", ok, err, m.DueAt)
	}
	r = runApp(t, openBackends, env, "failed", "delete", "--group", bus.FailureGroup("billing.ChargeCard", "billing", "card 1 declined"))
	if r.code != exitOK || r.stdout != "deleted 4 of 4 message(s)\n" {
		t.Fatalf("delete group: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if n, _ := p.CountFailed(ctx, bus.FailedQuery{}); n != 1 {
		t.Errorf("%d failed messages left, want 1", n)
	}
}

// TestProvisionMySQL: provision with a MySQL/MariaDB persistence alone sets
// up its tables.
func TestProvisionMySQL(t *testing.T) {
	t.Parallel()
	_, env := mysqlFixture(t)
	db, err := sql.Open("mysql", env["POSTBUS_MYSQL_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	table := "cli_" + bustest.Namespace()
	t.Cleanup(func() {
		for _, s := range []string{"", "_inbox", "_sagas", "_failed", "_recurring", "_runs"} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+table+s+"`")
		}
	})
	env["POSTBUS_MYSQL_TABLE"] = table
	r := runApp(t, openBackends, env, "provision", "--send-only")
	if r.code != exitOK || !strings.Contains(r.stdout, "mysql table "+table) {
		t.Fatalf("provision: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM `"+table+"_failed`").Scan(&n); err != nil {
		t.Errorf("the failed-message table of %s: %v", table, err)
	}
}

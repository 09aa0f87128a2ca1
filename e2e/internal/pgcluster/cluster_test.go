package pgcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/e2e/internal/pgcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// query runs one statement on a new connection to url.
func query(ctx context.Context, url, sql string, out ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if len(out) == 0 {
		_, err = conn.Exec(ctx, sql)
		return err
	}
	return conn.QueryRow(ctx, sql).Scan(out...)
}

// TestClusterLifecycle: a started cluster serves queries; its data survives
// a restart and a kill followed by a restart; a connection open across a
// restart is ended; after Stop nothing listens on its port.
func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, t.TempDir())
	if errors.Is(err, pgcluster.ErrUnavailable) {
		bustest.SkipOutsideCI(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if err := query(ctx, c.URL(), "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatalf("query the new cluster: %v", err)
	}
	open, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())

	if err := c.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := open.Ping(ctx); err == nil {
		t.Error("a connection opened before the restart still works after it")
	}
	var n int
	if err := query(ctx, c.URL(), "SELECT n FROM kept", &n); err != nil || n != 42 {
		t.Fatalf("after the restart: n=%d, %v; want 42", n, err)
	}

	if err := c.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err = query(short, c.URL(), "SELECT 1")
	cancelShort()
	if err == nil {
		t.Fatal("the cluster answers after Kill")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("restart after kill: %v", err)
	}
	if err := query(ctx, c.URL(), "SELECT n FROM kept", &n); err != nil || n != 42 {
		t.Fatalf("after kill and restart: n=%d, %v; want 42", n, err)
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second stop: %v, want nil", err)
	}
	short, cancelShort = context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if err := query(short, c.URL(), "SELECT 1"); err == nil {
		t.Error("the cluster answers after Stop")
	}
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSecondRunSkipsTheDuplicate runs the example twice on a fresh schema:
// the first run saves the order and publishes the event, the second one
// delivers the same message again and the inbox skips it.
func TestSecondRunSkipsTheDuplicate(t *testing.T) {
	url := cmp.Or(os.Getenv("POSTBUS_TEST_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		bustest.SkipOutsideCI(t, "PostgreSQL is not reachable at %s: %v", url, err)
		return
	}
	schema := fmt.Sprintf("outbox_example_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		_ = conn.Close(context.Background())
	})
	var first, second bytes.Buffer
	if err := run(&first, url, schema, true); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if err := run(&second, url, schema, false); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if !strings.Contains(first.String(), "billing received OrderPlaced o-1001") || !strings.Contains(first.String(), "orders table: 1 row(s)") {
		t.Errorf("first run printed:\n%s", first.String())
	}
	if !strings.Contains(second.String(), "already handled") || !strings.Contains(second.String(), "orders table: 1 row(s)") {
		t.Errorf("second run printed:\n%s", second.String())
	}
}

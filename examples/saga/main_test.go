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

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fast = timing{Reminder: 400 * time.Millisecond, Overdue: 800 * time.Millisecond, PayAfter: 200 * time.Millisecond}

// wantSteps checks the example's output: the paid order completes without
// a reminder, the other gets one reminder, then is cancelled.
func wantSteps(t *testing.T, out string) {
	t.Helper()
	for _, step := range []string{"o-1 placed", "o-2 placed", "o-1 paid", "o-2: payment reminder #1 sent",
		"o-2: payment overdue after 1 reminder(s); order cancelled", "both sagas ended"} {
		if !strings.Contains(out, step) {
			t.Errorf("output lacks %q:\n%s", step, out)
		}
	}
	if strings.Contains(out, "o-1: payment") {
		t.Errorf("a timeout of the paid order ran:\n%s", out)
	}
}

func TestInMemory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, bus.NewMemoryPersistence(), fast, false); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, out.String())
}

func TestPostgresSurvivesRestart(t *testing.T) {
	url := cmp.Or(os.Getenv("POSTBUS_TEST_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		bustest.SkipOutsideCI(t, "PostgreSQL is not reachable at %s: %v", url, err)
		return
	}
	schema := fmt.Sprintf("saga_example_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		_ = conn.Close(context.Background())
	})
	var out bytes.Buffer
	if err := runPostgres(ctx, &out, url, schema, fast); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, out.String())
	if !strings.Contains(out.String(), "bus stopped") {
		t.Errorf("no restart in:\n%s", out.String())
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outgoing_messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d scheduled rows left after both sagas ended, want 0", left)
	}
}

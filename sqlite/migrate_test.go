package sqlite_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// The table and index as versions without lease tokens or transports
// created them.
const tableWithoutTokens = `CREATE TABLE outgoing_messages (
	id           TEXT    NOT NULL PRIMARY KEY,
	kind         INTEGER NOT NULL,
	envelope     BLOB    NOT NULL,
	due_at       INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	lease_until  INTEGER NOT NULL DEFAULT 0,
	failures     INTEGER NOT NULL DEFAULT 0,
	last_error   TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL
);
CREATE INDEX outgoing_messages_available_idx ON outgoing_messages (available_at, id);`

// TestSetupMigratesATableWithoutLeaseTokensOrTransports: Setup on a file
// an earlier version created adds the lease_token and transport columns
// (Setup running twice changes nothing more), swaps the index, and keeps the rows: an
// old row belongs to every transport and is claimed under a token.
func TestSetupMigratesATableWithoutLeaseTokensOrTransports(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	p, err := sqlite.Open(path, sqlite.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	if _, err := p.DB().ExecContext(ctx, tableWithoutTokens); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(-time.Second).UnixNano()
	env := bus.MarshalEnvelope(&bus.Envelope{ID: "old-row", Type: "T", Kind: bus.KindCommand})
	if _, err := p.DB().ExecContext(ctx, `INSERT INTO outgoing_messages (id, kind, envelope, due_at, available_at, created_at)
		VALUES ('old-row', ?, ?, ?, ?, ?)`, int64(bus.KindCommand), env, due, due, due); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Setup(ctx); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}

	var cols []string
	rows, err := p.DB().QueryContext(ctx, "SELECT name FROM pragma_table_info('outgoing_messages')")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	for _, want := range []string{"lease_token", "transport"} {
		if !slices.Contains(cols, want) {
			t.Errorf("column %s missing after Setup (columns: %v)", want, cols)
		}
	}
	var indexes []string
	rows, err = p.DB().QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outgoing_messages' AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, n)
	}
	rows.Close()
	slices.Sort(indexes)
	if want := []string{"outgoing_messages_claim_idx", "outgoing_messages_due_idx", "outgoing_messages_type_due_idx"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes = %v, want %v", indexes, want)
	}

	got, err := p.ClaimDueOutgoing(ctx, "any-transport", time.Now(), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "old-row" || got[0].Token == "" || string(got[0].Envelope) != string(env) {
		t.Fatalf("claim after migration = %+v, %v; want old-row under a token", got, err)
	}
	if n, err := p.DeleteOutgoing(ctx, []bus.Claim{got[0].Claim()}); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v; want 1, nil", n, err)
	}
}

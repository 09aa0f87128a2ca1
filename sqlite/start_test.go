package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqlite"
)

// lockedFile returns a store on a fresh file whose write lock another
// handle (another process, as SQLite sees it) holds for hold, and a busy
// timeout of 200 ms, so Setup fails with SQLITE_BUSY while the lock is
// held.
func lockedFile(t *testing.T, hold time.Duration) *sqlite.Persistence {
	t.Helper()
	path := filepath.Join(t.TempDir(), "postbus.db")
	p, err := sqlite.Open(path, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(hold, func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		_ = conn.Close()
	})
	t.Cleanup(func() {
		if release.Stop() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			_ = conn.Close()
		}
	})
	return p
}

// Start on a file another process holds locked (a migration, say) for 3 s
// waits for the lock and succeeds.
func TestStartWaitsForLockedFile(t *testing.T) {
	t.Parallel()
	r := drivertest.StartStore(t, lockedFile(t, 3*time.Second), 20*time.Second)
	if r.Err != nil {
		t.Fatalf("Start on a file locked for 3 s = %v after %v, want success within StartTimeout", r.Err, r.Took)
	}
}

// Start on a file that stays locked fails after StartTimeout with an error
// matching bus.ErrStoreUnavailable.
func TestStartGivesUpOnLockedFile(t *testing.T) {
	t.Parallel()
	drivertest.WantStartUnavailable(t, lockedFile(t, time.Minute), 2*time.Second)
}

// Start fails at once, without bus.ErrStoreUnavailable, on a schema error:
// a view where Setup's table belongs.
func TestStartFailsAtOnceOnSchemaError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "postbus.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.DB().ExecContext(t.Context(), `CREATE VIEW outgoing_messages AS SELECT 1 AS id`); err != nil {
		t.Fatal(err)
	}
	drivertest.WantStartFailsAtOnce(t, p, 20*time.Second, "view")
}

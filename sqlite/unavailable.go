package sqlite

import (
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/postbus/bus/backend/sqlstore"
)

// String describes the store for logs and errors: "sqlite path table
// name".
func (p *Persistence) String() string { return "sqlite " + p.path + " table " + p.q.table }

// unavailable marks err with bus.StoreUnavailable when it says the file
// is locked by another connection beyond Options.BusyTimeout
// (SQLITE_BUSY, SQLITE_LOCKED): another process is writing, migrating or
// checkpointing, and retrying later may succeed. Every other error (a
// file that cannot be opened or written, a schema error) is returned as
// it is: retrying cannot fix it.
func unavailable(err error) error {
	return sqlstore.Unavailable(err, nil, func(err error) bool {
		return sqliteCode(err, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
	})
}

package sqlite

import (
	"context"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/postbus/bus"
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
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return bus.StoreUnavailable(err)
		}
	}
	return err
}

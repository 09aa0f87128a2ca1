package sqlite

import (
	"context"
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/postbus/bus/backend/sqlstore"
)

// newDialect is SQLite's sqlstore.Dialect: times as INTEGER Unix
// nanoseconds, one writer at a time (the pool holds one connection).
func newDialect() *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Name: "sqlite",
		TxFrom: func(ctx context.Context) (sqlstore.Tx, bool) {
			tx, ok := Tx(ctx)
			if !ok {
				return nil, false
			}
			return sqlstore.FromTx(tx), true
		},
		IsUnique: func(err error) bool { return sqliteCode(err, sqlite3.SQLITE_CONSTRAINT) },
		Times:    sqlstore.UnixTimes{Unit: time.Nanosecond},
	}
}

// sqliteCode reports whether err is an SQLite error whose primary result
// code is one of codes.
func sqliteCode(err error, codes ...int) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.Code()&0xff == c {
			return true
		}
	}
	return false
}

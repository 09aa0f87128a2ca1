package mysql

import (
	"context"
	"time"

	"github.com/postbus/bus/backend/sqlstore"
)

// newDialect is MySQL's and MariaDB's sqlstore.Dialect: text parameters
// as bytes (the columns are binary), times as microseconds since the
// epoch (times.go).
func newDialect() *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Name: "mysql",
		TxFrom: func(ctx context.Context) (sqlstore.Tx, bool) {
			tx, ok := Tx(ctx)
			if !ok {
				return nil, false
			}
			return sqlstore.FromTx(tx), true
		},
		IsUnique:    isDuplicate,
		IsRetryable: isDeadlock,
		Text:        func(s string) any { return []byte(s) },
		Times:       sqlstore.UnixTimes{Unit: time.Microsecond, Min: minMicros, Max: maxMicros},
	}
}

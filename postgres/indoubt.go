package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus/backend/sqlstore"
)

// inDoubt reports whether err, from a statement or a COMMIT, leaves open
// whether it took effect (see sqlstore.InDoubt): an error pgx raised
// before sending anything, or a failed connect, changed nothing; of the
// server's errors, only one that ended the connection or the backend
// (FATAL, PANIC, connection exception, operator intervention) leaves it
// open.
func inDoubt(err error) bool {
	return sqlstore.InDoubt(err, func(err error) bool {
		var connectErr *pgconn.ConnectError
		return pgconn.SafeToRetry(err) || errors.As(err, &connectErr)
	}, func(err error) (bool, bool) {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return false, false
		}
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" ||
			strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P"), true
	})
}

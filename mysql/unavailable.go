package mysql

import (
	"errors"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus/backend/sqlstore"
	"github.com/postbus/bus/driver"
)

// String describes the store for logs and errors: "mysql table `name`".
// A *sql.DB does not tell its address; errors of an unreachable server
// name it.
func (p *Persistence) String() string { return "mysql table " + p.n.table }

// unavailable returns err with its passwords redacted, marked with
// bus.StoreUnavailable when it says the server cannot be reached for now,
// which retrying later may fix (see sqlstore.Unreachable): a server error
// whose number transientNumber lists, or no answer from the server. An
// authentication the driver cannot do is not: retrying cannot fix it.
func unavailable(err error) error {
	return sqlstore.Unavailable(err, func(err error) error { return driver.RedactError(err) }, func(err error) bool {
		return sqlstore.Unreachable(err, func(err error) (bool, bool) {
			var me *mysqldriver.MySQLError
			if !errors.As(err, &me) {
				return false, false
			}
			return transientNumber(me.Number), true
		}, mysqldriver.ErrNoTLS, mysqldriver.ErrCleartextPassword, mysqldriver.ErrNativePassword,
			mysqldriver.ErrOldPassword, mysqldriver.ErrUnknownPlugin, mysqldriver.ErrOldProtocol)
	})
}

// transientNumber reports the server error numbers of a server that cannot
// serve now but may later.
func transientNumber(n uint16) bool {
	switch n {
	case 1040, // ER_CON_COUNT_ERROR: too many connections
		1203,       // ER_TOO_MANY_USER_CONNECTIONS
		1053,       // ER_SERVER_SHUTDOWN
		1077, 1079, // ER_NORMAL_SHUTDOWN, ER_SHUTDOWN_COMPLETE
		1152,                   // ER_ABORTING_CONNECTION
		1158, 1159, 1160, 1161, // network read and write errors
		1205,        // ER_LOCK_WAIT_TIMEOUT
		errDeadlock, // ER_LOCK_DEADLOCK
		1317,        // ER_QUERY_INTERRUPTED
		1927,        // ER_CONNECTION_KILLED (MariaDB)
		1969,        // ER_STATEMENT_TIMEOUT (MariaDB)
		3024,        // ER_QUERY_TIMEOUT (MySQL max_execution_time)
		4031:        // ER_CLIENT_INTERACTION_TIMEOUT
		return true
	}
	return false
}

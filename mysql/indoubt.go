package mysql

import (
	"database/sql/driver"
	"errors"
	"net"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus/backend/sqlstore"
)

// Server errors that end the connection mid-statement: the outcome of
// what it was running is unknown to the client.
const (
	errServerShutdown   = 1053
	errConnectionKilled = 1927 // MariaDB's ER_CONNECTION_KILLED
)

// inDoubt reports whether err, from an INSERT or a COMMIT, leaves open
// whether it took effect (see sqlstore.InDoubt): no connection (a failed
// dial) or a connection found broken before anything was written
// (driver.ErrBadConn) changed nothing; of the server's errors, only a
// shutdown or a killed connection leaves it open.
func inDoubt(err error) bool {
	return sqlstore.InDoubt(err, func(err error) bool {
		var op *net.OpError
		return errors.Is(err, driver.ErrBadConn) || errors.As(err, &op) && op.Op == "dial"
	}, func(err error) (bool, bool) {
		var me *mysqldriver.MySQLError
		if !errors.As(err, &me) {
			return false, false
		}
		return me.Number == errServerShutdown || me.Number == errConnectionKilled, true
	})
}

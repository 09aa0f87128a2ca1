package mysql

import (
	"context"
	"crypto/x509"
	"errors"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// String describes the store for logs and errors: "mysql table `name`".
// A *sql.DB does not tell its address; errors of an unreachable server
// name it.
func (p *Persistence) String() string { return "mysql table " + p.n.table }

// unavailable returns err with its passwords redacted, marked with
// bus.StoreUnavailable when it says the server cannot be reached for now,
// which retrying later may fix (see isUnavailable).
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	red := driver.RedactError(err)
	if isUnavailable(err) {
		return bus.StoreUnavailable(red)
	}
	return red
}

// isUnavailable reports whether err says the server could not be reached,
// or refused to serve for now: a failed dial or lost connection, a
// timeout, a server shutting down, too many connections. An error the
// server returned about what was asked (access denied, unknown database,
// a schema error), an authentication the driver cannot do, or a
// certificate that cannot be verified is not: retrying cannot fix it. So
// is a ctx that was cancelled.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		return transientNumber(me.Number)
	}
	for _, permanent := range []error{
		mysqldriver.ErrNoTLS, mysqldriver.ErrCleartextPassword, mysqldriver.ErrNativePassword,
		mysqldriver.ErrOldPassword, mysqldriver.ErrUnknownPlugin, mysqldriver.ErrOldProtocol,
	} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return false
	}
	// No answer from the server: a dial or network failure, a timeout, a
	// connection closed under the call (driver.ErrBadConn, ErrInvalidConn).
	return true
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

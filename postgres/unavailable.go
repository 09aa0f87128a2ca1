package postgres

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postbus/bus/backend/sqlstore"
	"github.com/postbus/bus/driver"
)

// String describes the store for logs and errors: the user, host, port
// and database of its pool and its table, as "postgres
// app@db.internal:5432/orders table "postbus"."outgoing_messages"". It
// never shows a password.
func (p *Persistence) String() string {
	c := p.pool.Config().ConnConfig
	return fmt.Sprintf("postgres %s@%s/%s table %s", c.User, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database, p.names.table)
}

// String describes the transport for logs and errors: the user, host,
// port and database of its pool and its messages table. It never shows a
// password.
func (t *Transport) String() string {
	c := t.pool.Config().ConnConfig
	return fmt.Sprintf("postgres transport %s@%s/%s table %s", c.User, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database, t.names.messages)
}

// unavailable returns err with its passwords redacted, marked with
// bus.StoreUnavailable when it says the server cannot be reached for now,
// which retrying later may fix (see sqlstore.Unreachable): a server error
// whose SQLSTATE transientCode lists, or no answer from the server.
func unavailable(err error) error {
	return sqlstore.Unavailable(err, func(err error) error { return driver.RedactError(err) }, func(err error) bool {
		return sqlstore.Unreachable(err, func(err error) (bool, bool) {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				return false, false
			}
			return transientCode(pgErr.Code), true
		})
	})
}

// transientCode reports the SQLSTATE codes of a server that cannot serve
// now but may later.
func transientCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection_exception
		strings.HasPrefix(code, "53"), // insufficient_resources: too_many_connections, out_of_memory, disk_full
		strings.HasPrefix(code, "58"): // system_error, io_error
		return true
	}
	switch code {
	case "57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up, in recovery
		"57P05", // idle_session_timeout
		"57014", // query_canceled: a statement_timeout, behind a lock
		"55P03", // lock_not_available
		"40001", // serialization_failure
		"40P01": // deadlock_detected
		return true
	}
	return false
}

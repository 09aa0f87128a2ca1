package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
)

// In-doubt stores. When the connection or the server dies while a store
// waits for its autocommitted INSERT or its COMMIT to be confirmed, the
// rows may be stored or not: the server may have committed before the
// reply was lost. Telling the caller "failed" for a message that will be
// delivered makes it send again, or give up on a message that goes out
// anyway. So StoreOutgoing asks on another connection of the pool which
// of its IDs are stored: all of them, and the call succeeds; none, and it
// fails with the error; some (rows stored before under the same IDs,
// which are kept as they are), and it stores the missing ones once more.
// A COMMIT the server is still working on when the check runs is not
// waited for.

// Server errors that end the connection mid-statement: the outcome of
// what it was running is unknown to the client.
const (
	errServerShutdown   = 1053
	errConnectionKilled = 1927 // MariaDB's ER_CONNECTION_KILLED
)

// inDoubt reports whether err, from an INSERT or a COMMIT, leaves open
// whether it took effect: the connection ended after the request may have
// reached the server. An error the server reported for the statement
// itself rolled it back; no connection (a failed dial) or a connection
// found broken before anything was written (driver.ErrBadConn) changed
// nothing.
func inDoubt(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) {
		return false
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		return me.Number == errServerShutdown || me.Number == errConnectionKilled
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return true
}

// settleInDoubt decides the outcome of a store of msgs that failed with
// err, in doubt: nil when every row is stored, after storing the missing
// ones again when some are; otherwise an error that wraps err.
func (p *Persistence) settleInDoubt(ctx context.Context, msgs []bus.OutgoingMessage, err error) error {
	missing, cerr := p.missingRows(ctx, msgs)
	switch {
	case cerr != nil:
		return fmt.Errorf("%w (whether its rows were stored is unknown: the check failed: %v)", err, cerr)
	case len(missing) == len(msgs):
		return fmt.Errorf("%w (none of its %d rows was stored)", err, len(msgs))
	case len(missing) > 0:
		if rerr := p.group.store(ctx, missing); rerr != nil {
			return fmt.Errorf("%w (%d of its %d rows not stored; storing them again failed: %v)", err, len(missing), len(msgs), rerr)
		}
	}
	p.log.Warn("mysql: store: the connection failed before the commit was confirmed; every row is stored",
		slog.Int("rows", len(msgs)), slog.Int("stored_again", len(missing)), slog.Any("error", err))
	return nil
}

// missingRows returns the rows of msgs whose IDs are not stored, asking on
// a connection of the pool (database/sql has dropped the failed one), in
// chunks of settleChunk IDs.
func (p *Persistence) missingRows(ctx context.Context, msgs []bus.OutgoingMessage) ([]bus.OutgoingMessage, error) {
	have := make(map[string]bool, len(msgs))
	for start := 0; start < len(msgs); start += settleChunk {
		chunk := msgs[start:min(start+settleChunk, len(msgs))]
		args := make([]any, len(chunk))
		for i := range chunk {
			args[i] = []byte(chunk[i].ID)
		}
		rows, err := p.db.QueryContext(ctx, "SELECT id FROM "+p.n.table+" WHERE id IN "+inList(len(chunk)), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id []byte
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return nil, err
			}
			have[string(id)] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var missing []bus.OutgoingMessage
	for _, m := range msgs {
		if !have[m.ID] {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

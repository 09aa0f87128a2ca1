package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
)

// In-doubt stores. When the connection or the backend dies while a store
// waits for its INSERT or COMMIT to be confirmed, the rows may be stored
// or not: the server may have committed before the reply was lost. Telling
// the caller "failed" for a message that will be delivered makes it send
// again, or give up on a message that goes out anyway. So StoreOutgoing
// asks on another connection of the pool which of its IDs are stored: all
// of them, and the call succeeds; none, and it fails with the error; some
// (rows stored before under the same IDs, which are kept as they are), and
// it stores the missing ones once more. A COMMIT the server is still
// working on when the check runs is not waited for.

// inDoubt reports whether err, from a statement or a COMMIT, leaves open
// whether it took effect: the connection ended (or the backend was
// terminated) after the request may have reached the server. An error the
// server reported for the statement itself rolled it back, and an error
// pgx raised before sending anything changed nothing.
func inDoubt(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" ||
			strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") // connection exception, operator intervention
	}
	return true
}

// settleInDoubt decides the outcome of a store of msgs that failed with
// err, in doubt: nil when every row is stored, after storing the missing
// ones again with store when some are; otherwise an error that wraps err.
func (p *Persistence) settleInDoubt(ctx context.Context, msgs []bus.OutgoingMessage, err error,
	store func(context.Context, []bus.OutgoingMessage) error) error {
	missing, cerr := p.missingRows(ctx, msgs)
	switch {
	case cerr != nil:
		return fmt.Errorf("%w (whether its rows were stored is unknown: the check failed: %v)", err, cerr)
	case len(missing) == len(msgs):
		return fmt.Errorf("%w (none of its %d rows was stored)", err, len(msgs))
	case len(missing) > 0:
		if rerr := store(ctx, missing); rerr != nil {
			return fmt.Errorf("%w (%d of its %d rows not stored; storing them again failed: %v)", err, len(missing), len(msgs), rerr)
		}
	}
	p.log.Warn("postgres: store outgoing: the connection failed before the commit was confirmed; every row is stored",
		slog.Int("rows", len(msgs)), slog.Int("stored_again", len(missing)), slog.Any("error", err))
	return nil
}

// missingRows returns the rows of msgs whose IDs are not stored, asking on
// a connection of the pool (the failed one is gone from it).
func (p *Persistence) missingRows(ctx context.Context, msgs []bus.OutgoingMessage) ([]bus.OutgoingMessage, error) {
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	rows, err := p.pool.Query(ctx, "SELECT id FROM "+p.names.table+" WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(stored))
	for _, id := range stored {
		have[id] = true
	}
	var missing []bus.OutgoingMessage
	for _, m := range msgs {
		if !have[m.ID] {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

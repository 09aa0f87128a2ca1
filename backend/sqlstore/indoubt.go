package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/postbus/bus/backend"
)

// In-doubt stores. When the connection or the server dies while a store
// waits for its statement or its COMMIT to be confirmed, the rows may be
// stored or not: the server may have committed before the reply was
// lost. Telling the caller "failed" for a message that will be delivered
// makes it send again, or give up on a message that goes out anyway. So
// StoreOutgoing asks on another connection of the pool which of its IDs
// are stored: all of them, and the call succeeds; none, and it fails with
// the error; some (rows stored before under the same IDs, which are kept
// as they are), and it stores the missing ones once more. A COMMIT the
// server is still working on when the check runs is not waited for.

// InDoubt reports whether err, from a statement or a COMMIT, leaves open
// whether it took effect: the connection ended after the request may
// have reached the server. A ctx that ended, or an error unsent reports
// (a failed dial, a connection found broken before anything was
// written), changed nothing. server classifies the server's own errors
// (known false: not one): one it reported for the statement rolled the
// statement back, unless it ended the connection. Any other error ended
// the connection mid-request: in doubt.
func InDoubt(err error, unsent func(error) bool, server func(error) (doubt, known bool)) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || unsent(err) {
		return false
	}
	if doubt, known := server(err); known {
		return doubt
	}
	return true
}

// settleInDoubt decides the outcome of a store of msgs that failed with
// err, in doubt: nil when every row is stored, after storing the missing
// ones again with store when some are; otherwise an error that wraps err.
func (s *Scheduled) settleInDoubt(ctx context.Context, msgs []backend.OutgoingMessage, err error,
	store func(context.Context, []backend.OutgoingMessage) error) error {
	missing, cerr := s.missingRows(ctx, msgs)
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
	s.c.Log.Warn(s.d.Name+": store"+s.c.Noun+": the connection failed before the commit was confirmed; every row is stored",
		slog.Int("rows", len(msgs)), slog.Int("stored_again", len(missing)), slog.Any("error", err))
	return nil
}

// inDoubtChunk bounds the IDs of one in-doubt check.
const inDoubtChunk = 1000

// missingRows returns the rows of msgs whose IDs are not stored, asking
// on a connection of the pool (the failed one is gone from it).
func (s *Scheduled) missingRows(ctx context.Context, msgs []backend.OutgoingMessage) ([]backend.OutgoingMessage, error) {
	have := make(map[string]bool, len(msgs))
	for start := 0; start < len(msgs); start += inDoubtChunk {
		chunk := msgs[start:min(start+inDoubtChunk, len(msgs))]
		ids := make([]string, len(chunk))
		for i := range chunk {
			ids[i] = chunk[i].ID
		}
		query, args := s.c.IDs(ids)
		if err := scanIDs(s.db.Query(ctx, query, args...))(have); err != nil {
			return nil, err
		}
	}
	var missing []backend.OutgoingMessage
	for _, m := range msgs {
		if !have[m.ID] {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// scanIDs returns a reader of a column of IDs into a set.
func scanIDs(rows Rows, err error) func(set map[string]bool) error {
	return func(set map[string]bool) error {
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			set[id] = true
		}
		return rows.Err()
	}
}

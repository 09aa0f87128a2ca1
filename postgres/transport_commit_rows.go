package postgres

import (
	"cmp"
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// commitRows is the committer's flush: one statement, so one transaction
// and one commit, for a group of sends. It returns the outcome of each
// row, and the notification of the queues it inserted into, for the
// committer to run once the callers are released.
func (t *Transport) commitRows(ctx context.Context, rows []sendRow) ([]error, func()) {
	errs := make([]error, len(rows))
	queues, err := t.insertRows(ctx, rows)
	switch {
	case err == nil:
	case len(rows) == 1 || !rowRefused(err):
		for i := range errs {
			errs[i] = err
		}
	default:
		// The database refused a row's data and rolled the whole group
		// back: commit each row on its own, so that only the bad rows fail.
		queues = nil
		for i := range rows {
			var q []string
			q, errs[i] = t.insertRows(ctx, rows[i:i+1])
			queues = append(queues, q...)
		}
	}
	if len(queues) == 0 || t.opts.DisableNotify {
		return errs, nil
	}
	return errs, func() { t.notify(queues) }
}

// insertRows inserts rows in one statement and returns the queues it
// inserted into.
func (t *Transport) insertRows(ctx context.Context, rows []sendRow) ([]string, error) {
	queues := make([]string, len(rows))
	ids := make([]string, len(rows))
	types := make([]string, len(rows))
	headers := make([]string, len(rows))
	bodies := make([][]byte, len(rows))
	envs := make([][]byte, len(rows))
	for i, r := range rows {
		queues[i], ids[i], types[i], headers[i] = r.queue, cleanText(r.id), cleanText(r.typ), r.headers
		bodies[i], envs[i] = r.body, r.envelope
	}
	rs, err := t.pool.Query(ctx, t.sql.send, queues, ids, types, headers, bodies, envs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rs, pgx.RowTo[string])
}

// notify wakes the receivers of queues, once each, after their rows were
// committed. A lost notification only delays the messages until the
// receivers' next poll, so its failure is no send's.
func (t *Transport) notify(queues []string) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, err := t.pool.Exec(ctx, t.sql.notify, t.names.channel, queues); err != nil {
		t.log.Warn("postgres: notification failed; receivers find the messages at their next poll", slog.Any("error", err))
	}
}

// rowRefused reports whether err is the database refusing the data of a
// statement's rows (a data exception, an integrity violation, a value too
// large), after which the transaction surely rolled back and the same rows
// one by one may partly succeed. Other errors (a lost connection, a
// missing table, a cancellation) are the group's.
func rowRefused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity) != "ERROR" || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

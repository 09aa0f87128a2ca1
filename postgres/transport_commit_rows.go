package postgres

import (
	"cmp"
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// commitRows is the committer's flush: one statement, so one transaction
// and one commit, for a group of sends, which also notifies each queue it
// inserted into once. It returns the outcome of each row.
func (t *Transport) commitRows(ctx context.Context, rows []sendRow) []error {
	errs := make([]error, len(rows))
	err := t.insertRows(ctx, rows)
	if err == nil {
		return errs
	}
	if len(rows) == 1 || !rowRefused(err) {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// The database refused a row's data and rolled the whole group back:
	// commit each row on its own, so that only the bad rows fail.
	for i := range rows {
		errs[i] = t.insertRows(ctx, rows[i:i+1])
	}
	return errs
}

func (t *Transport) insertRows(ctx context.Context, rows []sendRow) error {
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
	var channel *string // NULL: no notification
	if !t.opts.DisableNotify {
		channel = &t.names.channel
	}
	_, err := t.pool.Exec(ctx, t.sql.send, queues, ids, types, headers, bodies, envs, channel)
	return err
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

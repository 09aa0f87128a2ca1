package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus"
)

// Bulk inserts.
//
// A call with at least copyMinRows rows (a bus.SendBatch, a large outbox
// handling) is stored with COPY, in one transaction (its own, or the
// caller's or handling's under a savepoint):
//
//  1. COPY straight into the table. The rows stream in the binary format
//     while the server inserts them, with no array parameters to encode and
//     decode and no second pass, about twice as fast as an INSERT of the
//     same rows. A row with a Delay is due at the server's
//     statement_timestamp(), read at the start of the call, + Delay: a
//     moment after the send began, so never earlier than the single-row
//     INSERT would make it.
//  2. COPY has no ON CONFLICT: when an ID is already stored (a batch sent
//     again, or named twice in one call), the copy fails with a unique
//     violation and is rolled back to the savepoint. The rows are then
//     copied into a temporary staging table and inserted from it with one
//     INSERT ... SELECT ... ON CONFLICT (id) DO NOTHING, which keeps the
//     rows already stored, as for smaller calls.
//
// Either way the notification is one pg_notify with the earliest due time
// of the new rows, part of the transaction. In the caller's or a handling's
// transaction the staging table is dropped after use, so one transaction
// can store several batches; in a transaction of its own it goes at commit
// (ON COMMIT DROP).

// copyMinRows is the size from which a call is copied in: below it, one
// INSERT over arrays is as fast and takes one round trip instead of three.
const copyMinRows = 1000

// stagingTable is the temporary table of the second step: in the session's
// own temporary schema, so concurrent sessions never share it.
const stagingTable = "postbus_staging"

var (
	// copiedColumns are the table's columns a direct copy fills, in the
	// order of copiedRows values; the others take their defaults.
	copiedColumns = []string{"id", "kind", "envelope", "due_at", "available_at", "transport", "message_type"}
	// stagingColumns are the staging table's columns, in the order of
	// stagedRows values.
	stagingColumns = []string{"id", "kind", "envelope", "due_at", "delay_us", "transport", "message_type"}
)

type stagedStatements struct {
	start  string // the server's time at the start of a copy
	notify string // pg_notify($1, $2) after a direct copy
	create string // the staging table, dropped at commit
	insert string // INSERT ... SELECT from it
	// notifying is insert that also notifies $1; empty without
	// notifications.
	notifying string
	drop      string
}

func newStagedStatements(n names, notify bool) stagedStatements {
	st := stagedStatements{
		start:  `SELECT statement_timestamp()`,
		notify: `SELECT pg_notify($1, $2)`,
		create: fmt.Sprintf(`CREATE TEMPORARY TABLE %s (
	id text, kind int2, envelope bytea, due_at timestamptz, delay_us bigint, transport text, message_type text
) ON COMMIT DROP`, stagingTable),
		insert: insertSQL(n.table, "pg_temp."+stagingTable+" AS u"),
		drop:   "DROP TABLE pg_temp." + stagingTable,
	}
	if notify {
		st.notifying = notifySQL(st.insert, "$1")
	}
	return st
}

// storeCopied stores msgs (checked) in a transaction of its own.
func (p *Persistence) storeCopied(ctx context.Context, msgs []bus.OutgoingMessage) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		return p.copyIn(ctx, tx, msgs, true, false)
	})
}

// copyIn stores msgs in tx (see Bulk inserts), notifying as insertOn does
// when wake is set; drop drops the staging table, if used, for a
// transaction that may stage again before it commits.
func (p *Persistence) copyIn(ctx context.Context, tx pgx.Tx, msgs []bus.OutgoingMessage, wake, drop bool) error {
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return p.copyDirect(ctx, sp, msgs, wake) })
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" { // unique_violation: an ID already stored
		return err
	}
	return p.copyStaged(ctx, tx, msgs, wake, drop)
}

// copyDirect copies msgs straight into the table.
func (p *Persistence) copyDirect(ctx context.Context, tx pgx.Tx, msgs []bus.OutgoingMessage, wake bool) error {
	src := &copiedRows{rowCursor: newCursor(msgs)}
	if err := tx.QueryRow(ctx, p.staged.start).Scan(&src.start); err != nil {
		return fmt.Errorf("read the server's time: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{p.opts.Schema, p.opts.Table}, copiedColumns, src); err != nil {
		return fmt.Errorf("copy %d rows: %w", len(msgs), err)
	}
	if wake && p.sql.notify != "" && p.dueWithin(msgs) {
		payload := strconv.FormatInt(src.earliest.UnixMicro(), 10)
		if _, err := tx.Exec(ctx, p.staged.notify, p.names.channel, payload); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	return nil
}

// copyStaged copies msgs into the staging table and inserts them from
// there, keeping the rows of IDs already stored.
func (p *Persistence) copyStaged(ctx context.Context, tx pgx.Tx, msgs []bus.OutgoingMessage, wake, drop bool) error {
	if _, err := tx.Exec(ctx, p.staged.create); err != nil {
		return fmt.Errorf("create staging table: %w", err)
	}
	src := &stagedRows{newCursor(msgs)}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stagingTable}, stagingColumns, src); err != nil {
		return fmt.Errorf("copy %d rows to the staging table: %w", len(msgs), err)
	}
	var err error
	if wake && p.staged.notifying != "" && p.dueWithin(msgs) {
		_, err = tx.Exec(ctx, p.staged.notifying, p.names.channel)
	} else {
		_, err = tx.Exec(ctx, p.staged.insert)
	}
	if err != nil {
		return fmt.Errorf("insert %d staged rows: %w", len(msgs), err)
	}
	if drop {
		if _, err := tx.Exec(ctx, p.staged.drop); err != nil {
			return fmt.Errorf("drop staging table: %w", err)
		}
	}
	return nil
}

// dueWithin reports whether the earliest of msgs is due within
// Options.NotifyWithin, on the client's clock: only rows due before the
// dispatchers' next polls need a wake-up, and the choice never affects
// when a row becomes claimable.
func (p *Persistence) dueWithin(msgs []bus.OutgoingMessage) bool {
	now := time.Now()
	limit := now.Add(p.opts.NotifyWithin)
	for i := range msgs {
		due := msgs[i].DueAt
		if msgs[i].Delay > 0 {
			due = now.Add(msgs[i].Delay)
		}
		if !due.After(limit) {
			return true
		}
	}
	return false
}

// copiedRows is the pgx.CopyFromSource of a direct copy: one row of
// copiedColumns per message, in a slice reused from row to row (pgx
// encodes each row before asking for the next). It keeps the earliest due
// time it gave, for the notification.
type copiedRows struct {
	rowCursor
	start    time.Time // the server's time: a Delay counts from it
	earliest time.Time
}

func (s *copiedRows) Values() ([]any, error) {
	m := &s.msgs[s.i]
	due := m.DueAt
	if m.Delay > 0 {
		due = s.start.Add(time.Duration(micros(m.Delay)) * time.Microsecond)
	}
	if s.i == 0 || due.Before(s.earliest) {
		s.earliest = due
	}
	s.row = [7]any{m.ID, int16(m.Kind), m.Envelope, due, due, cleanText(m.Transport), cleanText(m.Type)}
	return s.row[:], nil
}

// stagedRows is the pgx.CopyFromSource of the staging table, like
// copiedRows, with the Delay for the INSERT to apply.
type stagedRows struct{ rowCursor }

func (s *stagedRows) Values() ([]any, error) {
	m := &s.msgs[s.i]
	s.row = [7]any{m.ID, int16(m.Kind), m.Envelope, m.DueAt, micros(m.Delay), cleanText(m.Transport), cleanText(m.Type)}
	return s.row[:], nil
}

// rowCursor walks the messages of a copy for a pgx.CopyFromSource, and
// holds the row it gives, reused from row to row.
type rowCursor struct {
	msgs []bus.OutgoingMessage
	i    int
	row  [7]any
}

func newCursor(msgs []bus.OutgoingMessage) rowCursor { return rowCursor{msgs: msgs, i: -1} }

func (c *rowCursor) Next() bool {
	c.i++
	return c.i < len(c.msgs)
}

func (c *rowCursor) Err() error { return nil }

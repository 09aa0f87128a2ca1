package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// Setup creates the table and its index if they do not exist, the
// inbox table of the outbox (Options.Table + "_inbox") and its index on
// handled_at, the saga table (Options.Table + "_sagas") and the table of
// recurring schedules (Options.Table + "_recurring"); it brings a table created by an earlier version up to date: it adds the lease_token
// and transport columns when they are missing (existing rows get no token
// and the transport ”) and the recurring table's liveness mark
// (alive_until) and runtime columns (spec, due_at, runs, skipped), creates
// the index of due runtime schedules and the claim index and drops the index the
// claim no longer uses. It is idempotent and safe to call from several
// processes at once: it runs in one write transaction. bus.Start calls it
// unless the bus is configured to skip setup.
//
// When another process holds the file's write lock beyond
// Options.BusyTimeout (SQLITE_BUSY), the error matches
// bus.ErrStoreUnavailable, and bus.Start retries Setup until
// Config.StartTimeout; any other error (a schema error, a file that
// cannot be written) fails Start at once.
func (p *Persistence) Setup(ctx context.Context) error {
	return unavailable(p.setup(ctx))
}

func (p *Persistence) setup(ctx context.Context) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: setup: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, p.q.create); err != nil {
		return fmt.Errorf("sqlite: setup: %w", err)
	}
	if err := p.migrate(ctx, tx); err != nil {
		return fmt.Errorf("sqlite: setup: %w", err)
	}
	for _, stmt := range slices.Concat(p.q.indexes, []string{p.q.inbox, p.q.inboxIndex, p.q.sagas.create, recurringDDL(p.q.table), runsDDL(p.q.table)}) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlite: setup: %w", err)
		}
	}
	if err := p.migrateRecurring(ctx, tx); err != nil {
		return fmt.Errorf("sqlite: setup: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: setup: %w", err)
	}
	return nil
}

// migrate adds the columns that the table lacks. SQLite has no ADD COLUMN
// IF NOT EXISTS, so it reads the table's columns first; the write
// transaction Setup holds keeps another process from adding them in
// between.
func (p *Persistence) migrate(ctx context.Context, tx *sql.Tx) error {
	have, err := columnsOf(ctx, tx, p.q.columns, p.q.table)
	if err != nil {
		return err
	}
	for _, c := range p.q.addColumns {
		if have[c.name] {
			continue
		}
		if _, err := tx.ExecContext(ctx, c.ddl); err != nil {
			return fmt.Errorf("add column %s: %w", c.name, err)
		}
		p.log.Info("sqlite: added a column to the scheduled-message table", "table", p.q.table, "column", c.name)
	}
	return nil
}

func columnsOf(ctx context.Context, tx *sql.Tx, query, table string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, query, table)
	if err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	defer func() { _ = rows.Close() }()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read columns: %w", err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	return have, nil
}

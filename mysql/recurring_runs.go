package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// runsSuffix names the table of the recurring runs under way.
const runsSuffix = "_runs"

// runsDDL is the table of the recurring occurrences being handled
// (bus.RecurringRunGuard, for RecurringPolicy's OverlapSkip): one row per
// schedule with a run under way, the occurrence's message ID and when
// (microseconds since the epoch, UTC) the run counts as finished.
func runsDDL(n names) string {
	return `CREATE TABLE IF NOT EXISTS ` + n.runs + ` (
	name      VARBINARY(255) NOT NULL,
	run_id    VARBINARY(255) NOT NULL,
	run_until BIGINT         NOT NULL,
	PRIMARY KEY (name)
)` + tableOptions
}

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way: in one transaction, the schedule's row
// locked, or inserted when there is none (of two racing inserts, the
// second finds the first's run).
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	var began bool
	err := p.inTx(ctx, func(tx *sql.Tx) error {
		var runID []byte
		var runUntil int64
		err := tx.QueryRowContext(ctx, "SELECT run_id, run_until FROM "+p.n.runs+" WHERE name = ? FOR UPDATE", []byte(name)).Scan(&runID, &runUntil)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, "INSERT INTO "+p.n.runs+" (name, run_id, run_until) VALUES (?, ?, ?)",
				[]byte(name), []byte(id), micros(until))
			if isDuplicate(err) {
				return nil // another occurrence began first
			}
			began = err == nil
			return err
		case err != nil:
			return err
		case string(runID) != id && runUntil > micros(now):
			return nil
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+p.n.runs+" SET run_id = ?, run_until = ? WHERE name = ?", []byte(id), micros(until), []byte(name))
		began = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mysql: begin the run of %s: %w", name, err)
	}
	return began, nil
}

// EndRecurringRun ends the run id of the schedule name.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := p.db.ExecContext(ctx, "DELETE FROM "+p.n.runs+" WHERE name = ? AND run_id = ?", []byte(name), []byte(id)); err != nil {
		return fmt.Errorf("mysql: end the run of %s: %w", name, err)
	}
	return nil
}

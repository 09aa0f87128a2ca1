package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// runsDDL is the table of the recurring occurrences being handled
// (bus.RecurringRunGuard, for RecurringPolicy's OverlapSkip): one row per
// schedule with a run under way, the occurrence's message ID and the time
// (Unix nanoseconds) after which the run counts as finished.
func runsDDL(table string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_recurring_runs (
	name      TEXT    NOT NULL PRIMARY KEY,
	run_id    TEXT    NOT NULL,
	run_until INTEGER NOT NULL
)`, table)
}

func (p *Persistence) runsTable() string { return p.q.table + "_recurring_runs" }

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way, in one statement: an insert that
// replaces the row of a run that ended or timed out, or of id itself.
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	res, err := p.db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (name, run_id, run_until) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET run_id = excluded.run_id, run_until = excluded.run_until
WHERE run_id = excluded.run_id OR run_until <= ?4`, p.runsTable()), name, id, nanos(until), nanos(now))
	if err != nil {
		return false, fmt.Errorf("sqlite: begin the run of %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: begin the run of %s: %w", name, err)
	}
	return n > 0, nil
}

// EndRecurringRun ends the run id of the schedule name.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := p.db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE name = ?1 AND run_id = ?2`, p.runsTable()), name, id); err != nil {
		return fmt.Errorf("sqlite: end the run of %s: %w", name, err)
	}
	return nil
}

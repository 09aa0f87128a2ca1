package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// runsSuffix names the table of the recurring runs under way: <Table>_runs.
const runsSuffix = "_runs"

// runsDDL is the table of the recurring occurrences being handled
// (bus.RecurringRunGuard, for RecurringPolicy's OverlapSkip): one row per
// schedule with a run under way, the occurrence's message ID and when the
// run counts as finished.
func runsDDL(n names) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	name      text        COLLATE "C" PRIMARY KEY,
	run_id    text        COLLATE "C" NOT NULL,
	run_until timestamptz NOT NULL
)`, n.runs)
}

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way, in one statement: an insert that takes
// over the row of a run that ended or timed out, or of id itself.
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	tag, err := p.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS r (name, run_id, run_until) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET run_id = EXCLUDED.run_id, run_until = EXCLUDED.run_until
WHERE r.run_id = EXCLUDED.run_id OR r.run_until <= $4`, p.names.runs), name, id, until, now)
	if err != nil {
		return false, fmt.Errorf("postgres: begin the run of %s: %w", name, err)
	}
	return tag.RowsAffected() > 0, nil
}

// EndRecurringRun ends the run id of the schedule name.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := p.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE name = $1 AND run_id = $2`, p.names.runs), name, id); err != nil {
		return fmt.Errorf("postgres: end the run of %s: %w", name, err)
	}
	return nil
}

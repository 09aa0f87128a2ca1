package sqlite

import (
	"context"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// recurrings is the kit's recurring-schedule store: its methods
// (DeclareRecurring, ClaimDueRecurring, BeginRecurringRun…) are
// Persistence's.
type recurrings = sqlstore.Recurrings

// recurringTable is the table of recurring schedules: Options.Table +
// "_recurring".
func (p *Persistence) recurringTable() string { return p.q.table + "_recurring" }

// recurringColumns are the columns of a record (sqlstore.RecurringSQL).
const recurringColumns = `name, fingerprint, schedule, generation, paused, last_tick, ticks, alive_until,
	spec, due_at, runs, skipped, spec IS NOT NULL`

// nowSQL is the current time in Unix nanoseconds, for updated_at.
const nowSQL = `CAST(unixepoch('subsec') * 1000000000 AS INTEGER)`

// newRecurrings returns the recurring store of p. Times are Unix
// nanoseconds, 0 for none; a step's writes run in its write transaction
// (BEGIN IMMEDIATE), and its cancels keep the rows whose lease runs at the
// store's now.
func (p *Persistence) newRecurrings() *recurrings {
	return sqlstore.NewRecurrings(p.dialect, sqlstore.FromDB(p.db, nil), recurringSQL(p.q.table), sqlstore.RecurringHooks{
		Check: checkRows,
		Write: func(ctx context.Context, tx sqlstore.Tx, cancel []string, rows []bus.OutgoingMessage) error {
			now := p.now()
			for _, id := range cancel {
				if _, err := tx.Exec(ctx, p.q.cancelOne, id, nanos(now)); err != nil {
					return err
				}
			}
			stx, _ := sqlstore.SQLTx(tx) // a transaction of FromDB's
			return p.insertRows(ctx, stx, rows, now)
		},
	})
}

// recurringSQL are the statements of the recurring store on the tables of
// table (recurring_schema.go). A claim first looks for a due record
// without the write lock, then selects and moves the due records in one
// write transaction, which SQLite lets one connection at a time hold on
// the file; the run guard is one upsert.
func recurringSQL(table string) sqlstore.RecurringSQL {
	t, runs := table+"_recurring", table+"_recurring_runs"
	sel := "SELECT " + recurringColumns + " FROM " + t
	return sqlstore.RecurringSQL{
		Load:   sel + ` WHERE name = ?1 AND fingerprint <> ''`,
		List:   sel + ` WHERE fingerprint <> '' ORDER BY name`,
		Lock:   `SELECT fingerprint FROM ` + t + ` WHERE name = ?1`,
		Insert: `INSERT INTO ` + t + ` (name, fingerprint, schedule, generation, spec, due_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?5, ` + nowSQL + `)`,
		Replace: `UPDATE ` + t + ` SET fingerprint = ?1, schedule = ?2, spec = ?3, due_at = ?4, generation = generation + 1,
	updated_at = ` + nowSQL + ` WHERE name = ?5`,
		Advance: `UPDATE ` + t + ` SET last_tick = ?1, ticks = ?2, alive_until = max(alive_until, ?3), due_at = ?4, runs = ?5,
	skipped = ?6, updated_at = ` + nowSQL + `
WHERE name = ?7 AND generation = ?8 AND last_tick = ?9 AND fingerprint = ?10 AND paused = ?11`,
		SetPaused: `UPDATE ` + t + ` SET paused = ?1, due_at = ?2, updated_at = ` + nowSQL + `,
	last_tick = CASE WHEN NOT ?1 AND last_tick < ?2 THEN ?2 ELSE last_tick END
WHERE name = ?3 AND fingerprint <> ''`,
		Delete: `UPDATE ` + t + ` SET fingerprint = '', schedule = '', paused = 0, last_tick = 0, ticks = '[]', alive_until = 0,
	spec = NULL, due_at = 0, runs = 0, skipped = 0, updated_at = ` + nowSQL + `
WHERE name = ?1 AND fingerprint <> ''`,
		// The claim's statements read the partial index on (due_at, name) in
		// order: the entries due and no others.
		ClaimProbe: `SELECT count(*) FROM (SELECT 1 FROM ` + t + ` WHERE spec IS NOT NULL AND due_at > 0 AND due_at <= ?1 LIMIT 1)`,
		ClaimSelect: sel + ` WHERE spec IS NOT NULL AND due_at > 0 AND due_at <= ?1 AND fingerprint <> ''
ORDER BY due_at, name LIMIT ?2`,
		ClaimMove: `UPDATE ` + t + ` SET due_at = ? WHERE name IN `,
		// Pages are a range of the primary key (BINARY collation: byte order).
		Page:       sel + ` WHERE name > ? AND name >= ? AND fingerprint <> '' ORDER BY name LIMIT ?`,
		PageBefore: sel + ` WHERE name > ? AND name >= ? AND name < ? AND fingerprint <> '' ORDER BY name LIMIT ?`,
		RunBegin: `INSERT INTO ` + runs + ` (name, run_id, run_until) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET run_id = excluded.run_id, run_until = excluded.run_until
WHERE run_id = excluded.run_id OR run_until <= ?4`,
		RunEnd: `DELETE FROM ` + runs + ` WHERE name = ?1 AND run_id = ?2`,
	}
}

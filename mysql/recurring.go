package mysql

import (
	"context"
	"database/sql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// recurrings is the kit's recurring-schedule store: its methods
// (DeclareRecurring, ClaimDueRecurring, BeginRecurringRun…) are
// Persistence's.
type recurrings = sqlstore.Recurrings

// atSQL is at of one parameter.
var atSQL = at("?")

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

// newRecurrings returns the recurring store of p: READ COMMITTED
// transactions (a deadlock victim runs again), times as microseconds
// converted in SQL (at, us), NULL for none, the schedule's text cleaned
// for its utf8mb4 column. A step's cancels skip the rows a claim holds.
func (p *Persistence) newRecurrings() *recurrings {
	db := sqlstore.FromDB(p.db, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	return sqlstore.NewRecurrings(p.dialect, db, recurringSQL(p.n), sqlstore.RecurringHooks{
		Check: checkRows,
		Write: func(ctx context.Context, tx sqlstore.Tx, cancel []string, rows []bus.OutgoingMessage) error {
			stx, _ := sqlstore.SQLTx(tx) // a transaction of FromDB's
			for _, id := range cancel {
				if _, err := p.cancelIn1(ctx, stx, id); err != nil {
					return err
				}
			}
			if len(rows) == 0 {
				return nil
			}
			return p.insertRows(ctx, stx, rows)
		},
		NullZero: true,
		Schedule: func(s string) any { return cleanText(s, 1<<16) },
	})
}

// recurringSQL are the statements of the recurring store. Every update
// raises the record's revision, so that its affected-row count is its
// matched count whatever the DSN's clientFoundRows says. Runtime
// schedules are claimed through claim_at (due_at of a record with a spec,
// NULL otherwise), indexed with the name: a claim is one ordered range
// scan of the records due, locked with FOR UPDATE SKIP LOCKED, so its cost
// grows with them, not with the records stored. The run guard locks the
// schedule's run (an upsert's affected-row count depends on
// clientFoundRows).
func recurringSQL(n names) sqlstore.RecurringSQL {
	t := n.recurring
	sel := "SELECT name, fingerprint, schedule, generation, paused, " + us("last_tick") + ", ticks, " + us("alive_until") +
		", spec, " + us("due_at") + ", runs, skipped, spec IS NOT NULL FROM " + t
	set := "revision = revision + 1, updated_at = UTC_TIMESTAMP(6)"
	// noAlive stands for a NULL alive_until in GREATEST, which has no NULL
	// argument: a liveness mark only moves forward.
	noAlive := epochSQL
	return sqlstore.RecurringSQL{
		Load: sel + " WHERE name = ? AND fingerprint <> ''",
		List: sel + " WHERE fingerprint <> '' ORDER BY name",
		Lock: "SELECT fingerprint FROM " + t + " WHERE name = ? FOR UPDATE",
		Insert: "INSERT INTO " + t + " (name, fingerprint, schedule, generation, ticks, spec, due_at, updated_at)" +
			" VALUES (?, ?, ?, 1, '[]', ?, " + atSQL + ", UTC_TIMESTAMP(6))",
		Replace: "UPDATE " + t + " SET fingerprint = ?, schedule = ?, spec = ?, due_at = " + atSQL + ", generation = generation + 1, " +
			set + " WHERE name = ?",
		Advance: "UPDATE " + t + " SET last_tick = " + atSQL + ", ticks = ?," +
			" alive_until = NULLIF(GREATEST(IFNULL(alive_until, " + noAlive + "), IFNULL(" + atSQL + ", " + noAlive + ")), " + noAlive + ")," +
			" due_at = " + atSQL + ", runs = ?, skipped = ?, " + set +
			" WHERE name = ? AND generation = ? AND last_tick <=> " + atSQL + " AND fingerprint = ? AND paused = ?",
		// The parameters, each used once, are a derived table's columns.
		SetPaused: "UPDATE " + t + " AS r JOIN (SELECT ? AS paused, " + atSQL + " AS at_) AS a" +
			" SET r.last_tick = IF(NOT a.paused AND (r.last_tick IS NULL OR r.last_tick < a.at_), a.at_, r.last_tick)," +
			" r.paused = a.paused, r.due_at = a.at_, r.revision = r.revision + 1, r.updated_at = UTC_TIMESTAMP(6)" +
			" WHERE r.name = ? AND r.fingerprint <> ''",
		Delete: "UPDATE " + t + " SET fingerprint = '', schedule = '', paused = false, last_tick = NULL, ticks = '[]'," +
			" alive_until = NULL, spec = NULL, due_at = NULL, runs = 0, skipped = 0, " + set + " WHERE name = ? AND fingerprint <> ''",
		ClaimSelect: sel + " WHERE claim_at <= " + atSQL + " AND spec IS NOT NULL AND fingerprint <> ''" +
			" ORDER BY claim_at, name LIMIT ? FOR UPDATE SKIP LOCKED",
		ClaimMove:  "UPDATE " + t + " SET due_at = " + atSQL + ", " + set + " WHERE name IN ",
		Page:       sel + " WHERE fingerprint <> '' AND name > ? AND name >= ? ORDER BY name LIMIT ?",
		PageBefore: sel + " WHERE fingerprint <> '' AND name > ? AND name >= ? AND name < ? ORDER BY name LIMIT ?",
		RunLock:    "SELECT run_id, run_until FROM " + n.runs + " WHERE name = ? FOR UPDATE",
		RunInsert:  "INSERT INTO " + n.runs + " (name, run_id, run_until) VALUES (?, ?, ?)",
		RunTake:    "UPDATE " + n.runs + " SET run_id = ?, run_until = ? WHERE name = ?",
		RunEnd:     "DELETE FROM " + n.runs + " WHERE name = ? AND run_id = ?",
	}
}

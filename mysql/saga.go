package mysql

import "github.com/postbus/bus/backend/sqlstore"

// sagas is the saga store, whose methods (LoadSaga, InsertSaga,
// UpdateSaga, DeleteSaga, SagaTable) Persistence promotes.
type sagas = sqlstore.Sagas

// sagaSQL is the SQL of the saga table (Options.Table + "_sagas"): one row
// per (saga, correlation), the state as the saga's JSON bytes exactly
// (LONGBLOB), the pending timeouts as a JSON array of message IDs, and the
// version. A duplicate key fails only its statement: the transaction stays
// usable. The update always changes version, so its affected-row count is
// the matched count whatever the DSN's clientFoundRows says.
func sagaSQL(n names) sqlstore.SagaSQL {
	t := n.sagas
	return sqlstore.SagaSQL{
		Table: t,
		Load:  "SELECT id, state, timeouts, version FROM " + t + " WHERE saga = ? AND correlation = ?",
		Insert: "INSERT INTO " + t + " (saga, correlation, id, state, timeouts, version, created_at, updated_at)" +
			" VALUES (?, ?, ?, ?, ?, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
		Update: "UPDATE " + t + " SET state = ?, timeouts = ?, version = version + 1, updated_at = UTC_TIMESTAMP(6)" +
			" WHERE saga = ? AND correlation = ? AND version = ?",
		Delete: "DELETE FROM " + t + " WHERE saga = ? AND correlation = ? AND version = ?",
	}
}

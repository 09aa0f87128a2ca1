package sqlite

import (
	"fmt"

	"github.com/postbus/bus/backend/sqlstore"
)

// sagas is the saga store, whose methods (LoadSaga, InsertSaga,
// UpdateSaga, DeleteSaga, SagaTable) Persistence promotes. Inside a
// handling it runs in the handling's transaction, which holds the store's
// only connection.
type sagas = sqlstore.Sagas

// sagaQueries is the SQL of the saga store on the saga table
// (Options.Table + "_sagas"): one row per (saga, correlation), the state
// as TEXT holding the saga's JSON bytes exactly (json_extract reads it),
// the pending timeouts as a JSON array of message IDs, and the version.
// Times are Unix nanoseconds, as in the other tables.
type sagaQueries struct {
	create string
	sql    sqlstore.SagaSQL // without Now, the store's clock
}

func newSagaQueries(t string) sagaQueries {
	return sagaQueries{
		create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	saga        TEXT    NOT NULL,
	correlation TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	timeouts    TEXT    NOT NULL DEFAULT '[]',
	version     INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (saga, correlation)
)`, t),
		sql: sqlstore.SagaSQL{
			Table: t,
			Load:  "SELECT id, state, timeouts, version FROM " + t + " WHERE saga = ?1 AND correlation = ?2",
			// DO NOTHING on the key only: any other constraint failure is
			// an error, unlike INSERT OR IGNORE.
			Insert: "INSERT INTO " + t + " (saga, correlation, id, state, timeouts, version, created_at, updated_at)" +
				" VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6) ON CONFLICT (saga, correlation) DO NOTHING",
			Update: "UPDATE " + t + " SET state = ?1, timeouts = ?2, version = version + 1, updated_at = ?6" +
				" WHERE saga = ?3 AND correlation = ?4 AND version = ?5",
			Delete: "DELETE FROM " + t + " WHERE saga = ?1 AND correlation = ?2 AND version = ?3",
		},
	}
}

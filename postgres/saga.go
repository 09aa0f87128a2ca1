package postgres

import (
	"fmt"

	"github.com/postbus/bus/backend/sqlstore"
)

// sagas is the saga store, whose methods (LoadSaga, InsertSaga,
// UpdateSaga, DeleteSaga, SagaTable) Persistence promotes.
type sagas = sqlstore.Sagas

// sagaSQL is the SQL of the saga store, on the saga table (the quoted,
// schema-qualified name SagaTable returns). Inserts use ON CONFLICT DO
// NOTHING and every write reports its affected rows, so a conflict never
// raises an error that would abort the transaction the statement runs in.
// The state column is json: inst.State must be JSON.
func sagaSQL(n names) sqlstore.SagaSQL {
	t := n.sagas
	return sqlstore.SagaSQL{
		Table: t,
		Load:  fmt.Sprintf(`SELECT id, state, timeouts, version FROM %s WHERE saga = $1 AND correlation = $2`, t),
		Insert: fmt.Sprintf(`INSERT INTO %s (saga, correlation, id, state, timeouts, version)
VALUES ($1, $2, $3, $4::json, $5::text[], 1)
ON CONFLICT (saga, correlation) DO NOTHING`, t),
		Update: fmt.Sprintf(`UPDATE %s SET state = $1::json, timeouts = $2::text[], version = version + 1, updated_at = now()
WHERE saga = $3 AND correlation = $4 AND version = $5`, t),
		Delete:        fmt.Sprintf(`DELETE FROM %s WHERE saga = $1 AND correlation = $2 AND version = $3`, t),
		ArrayTimeouts: true,
	}
}

package sqlite

import (
	"fmt"
	"strings"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// failed is the failed-message store of the kit (StoreFailed, ListFailed,
// CountFailed, GetFailed, FailedGroups, DeleteFailed), embedded in
// Persistence. The table is Options.Table + "_failed", created by Setup,
// with an index on (last_failed, id) and one on (failure_group,
// last_failed, id, first_failed).
type failed = sqlstore.Failed

const failedColumns = "id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope"

// newFailedSQL is SQLite's statements of the failed-message store on the
// table f.
func newFailedSQL(f string) sqlstore.FailedSQL {
	newer := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN excluded.last_failed > last_failed THEN excluded.%[1]s ELSE %[1]s END", col)
	}
	var sets []string
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, newer(c))
	}
	return sqlstore.FailedSQL{
		Placeholder: func(int) string { return "?" },
		Invalid:     bus.ErrInvalidMessage,
		Table:       f,
		Select:      "SELECT " + failedColumns + " FROM " + f,
		Before:      "(last_failed, id) < ({at}, {id})",
		// SQLite evaluates every SET expression on the old row, so
		// last_failed on the right is the stored one throughout.
		Store: "INSERT INTO " + f + " (" + failedColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" +
			` ON CONFLICT (id) DO UPDATE SET failures = failures + 1,
	first_failed = min(first_failed, excluded.first_failed),
	last_failed = max(last_failed, excluded.last_failed), ` + strings.Join(sets, ", ") +
			" WHERE last_failed <> excluded.last_failed",
		// The group index in its order, then the latest message of each
		// of the largest groups.
		Groups: fmt.Sprintf(`SELECT g.failure_group, g.n, g.first_failed, g.last_failed, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, count(*) AS n, min(first_failed) AS first_failed, max(last_failed) AS last_failed
      FROM %[1]s GROUP BY failure_group ORDER BY n DESC, last_failed DESC, failure_group LIMIT {limit}) AS g
JOIN %[1]s m ON m.rowid = (SELECT rowid FROM %[1]s WHERE failure_group = g.failure_group ORDER BY last_failed DESC, id DESC LIMIT 1)
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, f),
		Delete: "DELETE FROM " + f + " WHERE id IN (SELECT value FROM json_each({ids}))",
		IDs:    func(ids []string) any { return idList(ids) },
	}
}

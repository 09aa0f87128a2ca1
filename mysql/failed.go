package mysql

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

// newFailedSQL is MySQL's statements of the failed-message store on the
// table f.
func newFailedSQL(f string) sqlstore.FailedSQL {
	// MySQL assigns left to right, each assignment seeing the ones before
	// it: every expression below reads the stored last_failed, which is
	// assigned last. VALUES(col) is the value the insert proposed.
	const differs = "VALUES(last_failed) <> last_failed"
	const newer = "VALUES(last_failed) > last_failed"
	sets := []string{
		"failures = IF(" + differs + ", failures + 1, failures)",
		"first_failed = IF(" + differs + ", LEAST(first_failed, VALUES(first_failed)), first_failed)",
	}
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, fmt.Sprintf("%[1]s = IF(%[2]s, VALUES(%[1]s), %[1]s)", c, newer))
	}
	sets = append(sets, "last_failed = GREATEST(last_failed, VALUES(last_failed))")
	return sqlstore.FailedSQL{
		Placeholder: func(int) string { return "?" },
		Invalid:     bus.ErrInvalidMessage,
		Table:       f,
		Select: "SELECT id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, " +
			us("first_failed") + ", " + us("last_failed") + ", envelope FROM " + f,
		Before: "(last_failed < " + at("{at}") + " OR (last_failed = " + at("{at}") + " AND id < {id}))",
		Store: "INSERT INTO " + f + " (id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope)" +
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, " + atSQL + ", " + atSQL + ", ?) ON DUPLICATE KEY UPDATE " + strings.Join(sets, ", "),
		Reason: func(s string) any { return cleanText(s, 1<<16-1) },
		Groups: fmt.Sprintf(`SELECT g.failure_group, g.n, %s, %s, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, COUNT(*) AS n, MIN(first_failed) AS first_failed, MAX(last_failed) AS last_failed
      FROM %[3]s GROUP BY failure_group ORDER BY n DESC, last_failed DESC, failure_group LIMIT {limit}) AS g
JOIN %[3]s m ON m.id = (SELECT l.id FROM %[3]s l WHERE l.failure_group = g.failure_group ORDER BY l.last_failed DESC, l.id DESC LIMIT 1)
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, us("g.first_failed"), us("g.last_failed"), f),
		Delete: "DELETE FROM " + f + " WHERE id IN ({ids})",
		Chunk:  settleChunk,
	}
}

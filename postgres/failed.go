package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/backend/sqlstore"
)

// failed is the failed-message store of the kit (StoreFailed, ListFailed,
// CountFailed, GetFailed, FailedGroups, DeleteFailed), embedded in
// Persistence. IDs are stored as they are and must be storable text
// (storableID); other text is cleaned (cleanText). A batch is stored one
// statement per batch of distinct IDs; times are kept to the microsecond.
type failed = sqlstore.Failed

// failedColumns are the columns of a failed message, in the kit's order.
const failedColumns = `id, message_type, endpoint, queue, kind, reason, failure_group, attempts, failures, first_failed, last_failed, envelope`

// placeholder is PostgreSQL's mark of the n-th parameter.
func placeholder(n int) string { return "$" + strconv.Itoa(n) }

// newFailedSQL is PostgreSQL's statements of the failed-message store on
// the table f.
func newFailedSQL(f string) sqlstore.FailedSQL {
	return sqlstore.FailedSQL{
		Placeholder: placeholder,
		Clean:       cleanText,
		Storable:    storableID,
		CheckID: func(id string) error {
			switch {
			case id == "":
				return &InvalidRowError{Reason: "empty failed-message ID"}
			case !storableID(id):
				return &InvalidRowError{ID: id, Reason: "failed-message ID is not valid UTF-8 text without NUL bytes"}
			}
			return nil
		},
		Table:     f,
		Select:    "SELECT " + failedColumns + " FROM " + f,
		Before:    "(last_failed, id) < ({at}::timestamptz, {id}::text)",
		Store:     storeFailedSQL(f),
		StoreArgs: failedArgs,
		// The (failure_group, last_failed, id) INCLUDE (first_failed)
		// index aggregated in its order, without touching the table (an
		// index-only scan, as fresh as the visibility map), then one
		// message of each of the largest groups for its type, endpoint
		// and reason.
		Groups: fmt.Sprintf(`SELECT g.failure_group, g.n, g.first_failed, g.last_failed, m.message_type, m.endpoint, m.reason
FROM (SELECT failure_group, count(*) AS n, min(first_failed) AS first_failed, max(last_failed) AS last_failed
      FROM %[1]s GROUP BY failure_group
      ORDER BY n DESC, last_failed DESC, failure_group LIMIT {limit}) AS g
CROSS JOIN LATERAL (SELECT message_type, endpoint, reason FROM %[1]s f
                    WHERE f.failure_group = g.failure_group ORDER BY f.last_failed DESC, f.id DESC LIMIT 1) AS m
ORDER BY g.n DESC, g.last_failed DESC, g.failure_group`, f),
		Delete: "DELETE FROM " + f + " WHERE id = ANY({ids}::text[])",
		IDs:    func(ids []string) any { return ids },
	}
}

// storeFailedSQL inserts a batch of distinct IDs. On a conflict, a
// different last_failed is a new failure: it is counted, first_failed keeps
// the earliest time, and when it is the latest failure its fields replace
// the stored ones. The same last_failed is the same failure delivered
// again, and the WHERE clause leaves the row alone.
func storeFailedSQL(table string) string {
	newer := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN excluded.last_failed > f.last_failed THEN excluded.%[1]s ELSE f.%[1]s END", col)
	}
	var sets []string
	for _, c := range []string{"message_type", "endpoint", "queue", "kind", "reason", "failure_group", "attempts", "envelope"} {
		sets = append(sets, newer(c))
	}
	return fmt.Sprintf(`INSERT INTO %s AS f (%s)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::int[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::bytea[])
ON CONFLICT (id) DO UPDATE SET
	failures = f.failures + 1,
	first_failed = least(f.first_failed, excluded.first_failed),
	last_failed = greatest(f.last_failed, excluded.last_failed),
	%s
WHERE f.last_failed <> excluded.last_failed`, table, failedColumns, strings.Join(sets, ",\n\t"))
}

// failedArgs are the column arrays of storeFailedSQL for msgs.
func failedArgs(msgs []bus.FailedMessage) []any {
	n := len(msgs)
	ids, types, endpoints, queues, kinds, reasons, groups := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, failures := make([]int32, n), make([]int32, n)
	first, last := make([]time.Time, n), make([]time.Time, n)
	envs := make([][]byte, n)
	for i, m := range msgs {
		ids[i], types[i], endpoints[i], queues[i] = m.ID, cleanText(m.Type), cleanText(m.Endpoint), cleanText(m.Queue)
		kinds[i], reasons[i], groups[i] = cleanText(m.Kind), cleanText(m.Reason), cleanText(m.Group)
		attempts[i], failures[i] = int32(m.Attempts), int32(m.Failures)
		first[i], last[i], envs[i] = m.FirstFailed, m.LastFailed, m.Envelope
	}
	return []any{ids, types, endpoints, queues, kinds, reasons, groups, attempts, failures, first, last, envs}
}

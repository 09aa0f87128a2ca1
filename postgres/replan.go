package postgres

import (
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Claims planned at each call.
//
// pgx prepares each statement once per connection by default, and
// PostgreSQL plans a prepared statement for its arguments at its first
// five executions, then may keep a generic plan for good, costed on the
// table as it was at the sixth. A dispatcher polls its table many times
// before a burst falls due, while the table is empty or holds only the
// burst's first rows: the generic plan kept then leases the rows it
// selected through a sequential scan of the whole table, one pass per
// batch (claims of 500 rows from a burst of 20,000 drained it at a third
// of its pace). So the claims run as unnamed statements, which the server
// plans at every call for the arguments given; pgx still caches their
// descriptions, so a claim stays one round trip. The settlements find
// their rows through the primary key under either plan. (How a claim
// planned for its arguments still reads only the rows it leases: see
// claimSQL.)

// replanning returns the query-mode argument that makes pgx run a
// statement on pool unprepared, planned at each call, when the pool's
// default mode would keep a prepared statement; nil when the default
// mode already plans each call (the pool's owner chose it).
func replanning(pool *pgxpool.Pool) []any {
	cfg := pool.Config().ConnConfig
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	if cfg.DescriptionCacheCapacity > 0 {
		return []any{pgx.QueryExecModeCacheDescribe}
	}
	return []any{pgx.QueryExecModeDescribeExec}
}

// replanned returns args after mode (replanning's result), in a new slice.
func replanned(mode []any, args ...any) []any {
	return append(slices.Clip(mode), args...)
}
